//go:build !unix

package replay_test

import (
	"testing"
	"time"
)

// processCPU is not measured here: the benchmarks report wall time only.
func processCPU(*testing.B) time.Duration { return 0 }

//go:build unix

package replay_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time the process has used so far (user and
// system, every thread's).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

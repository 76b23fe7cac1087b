package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// The seeds' "GPU reset" was a double clear in the same process: every N
// trials the cache is released, but the process (its context, its
// corruption if any) stays.
func TestResetByClearKeepsTheProcess(t *testing.T) {
	big := simple("big", time.Millisecond, 200*miB)
	small := simple("small", time.Millisecond, 20*miB)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: gpu.Options{Capacity: 2 * giB}, Workers: 1, Policy: workers.Policy{ResetEvery: 2, ResetByClear: true},
		Next: queue([]*trace.Trace{big, big, small, big, small}), Done: collect(&rs),
	})
	require.NoError(t, err)
	var procs []int
	var peaks []uint64
	for _, r := range rs {
		procs = append(procs, r.Process)
		peaks = append(peaks, r.PeakReserved)
	}
	assert.Equal(t, []int{1, 1, 1, 1, 1}, procs, "no process restart")
	assert.Zero(t, sum.Restarts)
	// Trial 2 reuses trial 1's segment (no reset after one trial). After
	// trial 2 the cache was cleared: trial 3 (small) gets a fresh 20 MiB
	// segment, which trial 4 keeps beside its own 200 MiB (no reset after
	// trial 3); after trial 4 the cache was cleared again.
	assert.Equal(t, []uint64{200 * miB, 200 * miB, 20 * miB, 220 * miB, 20 * miB}, peaks)
}

package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// A parked worker starts nothing (no process, no task) until another
// worker's task ends, and then starts at that moment.
func TestHoldParksUntilATaskEnds(t *testing.T) {
	long := simple("long", time.Millisecond, 10*miB, 10*miB)
	short := simple("short", time.Millisecond, 10*miB)
	running := 0
	var asked []time.Duration
	var rs []workers.TaskResult
	next := queue([]*trace.Trace{long}, []*trace.Trace{short})
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 2,
		Hold: func(w int, now time.Duration) bool {
			if w == 1 {
				asked = append(asked, now)
				return running > 0 // worker 1 waits for an empty GPU
			}
			return false
		},
		Next: func(w int, now time.Duration) (workers.Task, bool) {
			t, ok := next(w, now)
			if ok {
				running++
			}
			return t, ok
		},
		Done: func(r workers.TaskResult) error { running--; return collect(&rs)(r) },
	})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "long", rs[0].Task.Label)
	assert.Equal(t, "short", rs[1].Task.Label)
	assert.Equal(t, rs[0].End, rs[1].Start, "the parked worker starts when the other's task ends")
	assert.Equal(t, []time.Duration{0, rs[0].End, rs[1].End}, asked,
		"asked at its start, woken once by the end of long, then once more after its own task")
	assert.Equal(t, 2, sum.Completed)
	assert.Equal(t, 20*miB, sum.PeakReserved, "never both at once: the short trial's 10 MiB came after")
}

// Holding every worker while nothing runs would wait forever: an error.
func TestHoldEveryWorkerIsAnError(t *testing.T) {
	tr := simple("t", time.Millisecond, 10*miB)
	_, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 2,
		Hold: func(int, time.Duration) bool { return true },
		Next: queue([]*trace.Trace{tr}, []*trace.Trace{tr}),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing would wake it")
}

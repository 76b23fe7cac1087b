package workers_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// gpu is a small device with round numbers: no context overhead unless a
// test asks.
func onGPU(capacity uint64) gpu.Options {
	return gpu.Options{Capacity: capacity, NoContextOverhead: true}
}

func TestOneTaskTimeIsComputePlusDeviceCalls(t *testing.T) {
	tr := simple("t", time.Millisecond, 30*miB, 50*miB, 100*kiB)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1,
		Next: queue([]*trace.Trace{tr}), Done: collect(&rs),
	})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	r := rs[0]
	assert.Equal(t, workers.Completed, r.Outcome)
	assert.Equal(t, int64(len(tr.Events)), r.Events)
	assert.Equal(t, 30*miB+50*miB+100*kiB, r.PeakAllocated)
	// Three segments: 30 MiB and 50 MiB (large pool, rounded to 2 MiB)
	// and one 2 MiB small-pool segment.
	assert.Equal(t, 82*miB, r.PeakReserved)
	assert.Equal(t, 82*miB, r.ReservedUnallocated, "the cache keeps every segment")
	assert.Positive(t, r.DeviceTime, "three cudaMallocs")
	// Alone and with Share 1, a trial takes its compute plus the time
	// of its device calls, nothing more.
	assert.Equal(t, duration(tr)+r.DeviceTime, r.End-r.Start)
	assert.Equal(t, r.End, sum.Makespan)
	assert.Equal(t, 1, sum.Completed)
	assert.Equal(t, 82*miB, sum.PeakDeviceUsed)
	assert.Equal(t, 82*miB, sum.PeakReserved)
	assert.Equal(t, 80*miB+100*kiB, sum.PeakLive)
	// The run's device time also counts the new allocator's
	// cudaMemGetInfo at process start, which StartupCost stands for.
	assert.Equal(t, r.DeviceTime+2*time.Microsecond, sum.DeviceTime)
}

func TestEventsApplyInGlobalTimeOrder(t *testing.T) {
	// Three workers with different paces and offsets; every event
	// reports the clock, which must never go back, and equal times
	// resolve by worker index.
	mk := func(step time.Duration, n int) []*trace.Trace {
		var ts []*trace.Trace
		for i := 0; i < n; i++ {
			ts = append(ts, simple("x", step, 4*miB, 1*miB, 8*kiB))
		}
		return ts
	}
	var times []time.Duration
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(4 * giB), Workers: 3,
		Stagger: []time.Duration{0, 3 * time.Millisecond},
		Next:    queue(mk(time.Millisecond, 3), mk(700*time.Microsecond, 4), mk(2*time.Millisecond, 2)),
		Done:    collect(&rs),
		Timeline: func(now time.Duration, used uint64) {
			times = append(times, now)
		},
	})
	require.NoError(t, err)
	assert.Equal(t, 9, sum.Completed)
	assert.Equal(t, sum.Events, int64(len(times)))
	for i := 1; i < len(times); i++ {
		require.GreaterOrEqual(t, times[i], times[i-1], "event %d", i)
	}
	for i := 1; i < len(rs); i++ {
		require.GreaterOrEqual(t, rs[i].End, rs[i-1].End, "Done in order of task ends")
	}
	assert.Equal(t, rs[len(rs)-1].End, sum.Makespan)
}

func TestTiesGoToTheLowerWorker(t *testing.T) {
	tr := simple("same", time.Millisecond, 10*miB)
	var order []int
	_, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 3,
		Next: queue([]*trace.Trace{tr}, []*trace.Trace{tr}, []*trace.Trace{tr}),
		Done: func(r workers.TaskResult) error { order = append(order, r.Worker); return nil },
		// Identical workers with no device costs in play would tie
		// everywhere; costs are the same for all three, so they still do.
	})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 2}, order)
}

func TestContentionSlowsConcurrentTrials(t *testing.T) {
	tr := simple("t", 10*time.Millisecond, 1*miB) // ~40 ms of compute
	run := func(share float64) workers.Summary {
		s, err := workers.Run(workers.Options{
			GPU: onGPU(1 * giB), Workers: 2, Compute: workers.Compute{Share: share},
			Next: queue([]*trace.Trace{tr}, []*trace.Trace{tr}),
		})
		require.NoError(t, err)
		return s
	}
	var rs []workers.TaskResult
	alone, err := workers.Run(workers.Options{GPU: onGPU(1 * giB), Workers: 1, Next: queue([]*trace.Trace{tr}), Done: collect(&rs)})
	require.NoError(t, err)
	full := run(1)    // time slicing: two trials take twice as long
	half := run(0.5)  // each trial uses half the GPU: two run at full speed
	third := run(0.8) // 2 x 0.8 = 1.6 GPUs' worth: each runs at 1/1.6
	d := duration(tr)
	dev := rs[0].DeviceTime // per trial: the device calls are the same
	assert.Equal(t, d+dev, alone.Makespan)
	assert.InDelta(t, float64(2*d+dev), float64(full.Makespan), float64(time.Microsecond))
	assert.InDelta(t, float64(d+dev), float64(half.Makespan), float64(time.Microsecond))
	assert.InDelta(t, float64(time.Duration(1.6*float64(d))+dev), float64(third.Makespan), float64(time.Microsecond))
}

func TestOOMPrunesTheTrialAndFreesItsBlocks(t *testing.T) {
	big := simple("big", time.Millisecond, 300*miB, 300*miB, 600*miB) // cannot fit in 1 GiB
	small := simple("small", time.Millisecond, 200*miB)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1,
		Next: queue([]*trace.Trace{big, small}), Done: collect(&rs),
	})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, workers.PrunedOOM, rs[0].Outcome)
	assert.Contains(t, rs[0].Err, "out of memory")
	assert.Equal(t, int64(1), rs[0].OOMs)
	assert.Equal(t, int64(1), rs[0].Retries, "the allocator released its cache and retried before raising")
	assert.Equal(t, int64(4), rs[0].Events, "trial_start, two allocs, the failing alloc")
	assert.Equal(t, 600*miB, rs[0].PeakAllocated)
	// The two 300 MiB blocks were freed: all that is reserved is free.
	assert.Equal(t, 600*miB, rs[0].ReservedUnallocated)
	assert.Equal(t, workers.Completed, rs[1].Outcome, "the cached 300 MiB segment serves the next trial")
	assert.Equal(t, 1, sum.PrunedOOM)
	assert.Equal(t, 1, sum.Completed)
	assert.False(t, sum.Stopped)
}

func TestStopOnOOMEndsTheRun(t *testing.T) {
	big := simple("big", time.Millisecond, 2*giB)
	small := simple("small", time.Millisecond, 1*miB)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 2, Policy: workers.Policy{OnOOM: workers.StopOnOOM},
		Stagger: []time.Duration{0, time.Second},
		Next:    queue([]*trace.Trace{big, small}, []*trace.Trace{small}), Done: collect(&rs),
	})
	require.NoError(t, err)
	assert.True(t, sum.Stopped)
	require.Len(t, rs, 1)
	assert.Equal(t, workers.PrunedOOM, rs[0].Outcome)
	assert.Equal(t, rs[0].End, sum.Makespan)
}

func TestStickyErrorRestartsTheWorker(t *testing.T) {
	tr := simple("t", time.Millisecond, 100*miB, 10*miB)
	ts := []*trace.Trace{tr, tr, tr}
	faultOn := func(ids ...int) func(int, workers.Task) *workers.Fault {
		return func(w int, tk workers.Task) *workers.Fault {
			for _, id := range ids {
				if tk.ID == id {
					return &workers.Fault{AtEvent: 2, Name: "cudaErrorIllegalAddress"}
				}
			}
			return nil
		}
	}
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1,
		Policy: workers.Policy{RestartOnStickyError: true, StartupCost: time.Second},
		Next:   queue(ts), Done: collect(&rs), Fault: faultOn(1),
	})
	require.NoError(t, err)
	require.Len(t, rs, 3)
	assert.Equal(t, workers.Failed, rs[0].Outcome)
	assert.Contains(t, rs[0].Err, "illegal")
	assert.Equal(t, int64(2), rs[0].Events, "the fault fires before event 2")
	assert.Equal(t, 1, rs[0].Process)
	assert.Equal(t, workers.Completed, rs[1].Outcome)
	assert.Equal(t, 2, rs[1].Process, "a fresh process")
	assert.Equal(t, uint64(0), rs[1].ReservedUnallocated-110*miB, "the fresh allocator's cache holds only this trial's segments")
	assert.GreaterOrEqual(t, rs[1].Start-rs[0].End, time.Second, "the restart's startup cost")
	assert.Equal(t, 1, sum.Restarts)
	assert.Equal(t, 1, sum.Failed)

	// Without restarts the worker stops at its first failure.
	rs = nil
	sum, err = workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1,
		Next: queue(ts), Done: collect(&rs), Fault: faultOn(1),
	})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, 0, sum.Restarts)

	// Three failures in a row give the worker up (the seeds' supervisor).
	rs = nil
	five := []*trace.Trace{tr, tr, tr, tr, tr}
	sum, err = workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1, Policy: workers.Policy{RestartOnStickyError: true},
		Next: queue(five), Done: collect(&rs), Fault: faultOn(2, 3, 4),
	})
	require.NoError(t, err)
	require.Len(t, rs, 4)
	assert.Equal(t, []workers.Outcome{workers.Completed, workers.Failed, workers.Failed, workers.Failed},
		[]workers.Outcome{rs[0].Outcome, rs[1].Outcome, rs[2].Outcome, rs[3].Outcome})
	assert.Equal(t, []int{0}, sum.GivenUp)
	assert.Equal(t, 2, sum.Restarts, "restarted after the first two failures, given up at the third")
}

func TestFaultPastTheLastEventDoesNotFire(t *testing.T) {
	tr := simple("t", time.Millisecond, 1*miB)
	var rs []workers.TaskResult
	_, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1, Next: queue([]*trace.Trace{tr}), Done: collect(&rs),
		Fault: func(int, workers.Task) *workers.Fault { return &workers.Fault{AtEvent: 1000} },
	})
	require.NoError(t, err)
	assert.Equal(t, workers.Completed, rs[0].Outcome)
}

func TestResetEveryStartsFreshProcesses(t *testing.T) {
	tr := simple("t", time.Millisecond, 64*miB)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: gpu.Options{Capacity: 2 * giB}, Workers: 1, Policy: workers.Policy{ResetEvery: 2},
		Next: queue([]*trace.Trace{tr, tr, tr, tr, tr}), Done: collect(&rs),
	})
	require.NoError(t, err)
	var procs []int
	for _, r := range rs {
		procs = append(procs, r.Process)
	}
	assert.Equal(t, []int{1, 1, 2, 2, 3}, procs)
	assert.Equal(t, 2, sum.Restarts)
	assert.Equal(t, gpu.DefaultContextOverhead+64*miB, sum.PeakDeviceUsed, "one process at a time: the old one exits first")
	assert.Equal(t, 64*miB, sum.PeakReserved, "contexts excluded")
}

// Every process that exits (a reset, the run's end) has its allocator
// discarded, so that the next process's allocator takes its Blocks'
// memory (allocator.Discard); the results are those of TestResetEvery
// above, which reads the processes' figures after their exits.
func TestExitedProcessesAreDiscarded(t *testing.T) {
	tr := simple("t", time.Millisecond, 64*miB)
	var gone []*allocator.Allocator
	defer workers.OnDiscard(func(a *allocator.Allocator) { gone = append(gone, a) })()
	_, err := workers.Run(workers.Options{
		GPU: gpu.Options{Capacity: 2 * giB}, Workers: 1, Policy: workers.Policy{ResetEvery: 2},
		Next: queue([]*trace.Trace{tr, tr, tr, tr, tr}),
	})
	require.NoError(t, err)
	require.Len(t, gone, 3, "three processes, each exited")
	for _, a := range gone {
		_, err := a.Malloc(miB, 0)
		assert.ErrorIs(t, err, allocator.ErrDiscarded)
	}
}

func TestEmptyCacheBetweenTrialsReleasesTheCache(t *testing.T) {
	big := simple("big", time.Millisecond, 200*miB)
	small := simple("small", time.Millisecond, 20*miB)
	run := func(p workers.Policy) []workers.TaskResult {
		var rs []workers.TaskResult
		_, err := workers.Run(workers.Options{
			GPU: onGPU(1 * giB), Workers: 1, Policy: p,
			Next: queue([]*trace.Trace{big, small}), Done: collect(&rs),
		})
		require.NoError(t, err)
		return rs
	}
	keep := run(workers.Policy{})
	clearOne := run(workers.Policy{EmptyCacheBetweenTrials: true})
	clearTwo := run(workers.Policy{DoubleClear: true})
	// Kept, the 200 MiB segment serves the small trial (best fit, split):
	// its peak reserved is the big one.
	assert.Equal(t, 200*miB, keep[1].PeakReserved)
	assert.Equal(t, 20*miB, clearOne[1].PeakReserved)
	assert.Equal(t, 20*miB, clearTwo[1].PeakReserved)
	assert.Greater(t, clearOne[1].DeviceTime, keep[1].DeviceTime, "a fresh cudaMalloc")
}

func TestDoubleClearReleasesWhatWaitedOnAStream(t *testing.T) {
	// A block used on a side stream and freed without its free_completed
	// stays pending; empty_cache waits for it (PyTorch synchronises all
	// events first), so both clears release the segment.
	b := newBuild("side", time.Millisecond)
	a := b.alloc(50 * miB)
	b.add(trace.Event{Action: trace.ActionRecordStream, Addr: a, Stream: 7})
	b.add(trace.Event{Action: trace.ActionFreeRequested, Addr: a})
	tr := b.done()
	small := simple("small", time.Millisecond, 512*kiB)
	for _, p := range []workers.Policy{{EmptyCacheBetweenTrials: true}, {DoubleClear: true}} {
		var rs []workers.TaskResult
		_, err := workers.Run(workers.Options{
			GPU: onGPU(1 * giB), Workers: 1, Policy: p,
			Next: queue([]*trace.Trace{tr, small}), Done: collect(&rs),
		})
		require.NoError(t, err)
		assert.Equal(t, 2*miB, rs[1].PeakReserved, "%+v", p)
	}
}

func TestExpandableSegmentsRunThroughTheMeter(t *testing.T) {
	cfg, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	tr := simple("t", time.Millisecond, 30*miB, 50*miB)
	var rs []workers.TaskResult
	_, err = workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Alloc: &cfg, Workers: 1,
		Next: queue([]*trace.Trace{tr}), Done: collect(&rs),
	})
	require.NoError(t, err)
	assert.Equal(t, workers.Completed, rs[0].Outcome)
	assert.Equal(t, 80*miB, rs[0].PeakReserved, "one segment grown page by page")
	assert.Positive(t, rs[0].DeviceTime)
}

func TestContextThatDoesNotFitFailsTheTask(t *testing.T) {
	// Two workers on a GPU that holds one context and a trial: the
	// second worker's CUDA initialisation fails while the first runs.
	tr := simple("t", 100*time.Millisecond, 400*miB) // allocates at 100 ms
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU:     gpu.Options{Capacity: gpu.DefaultContextOverhead + 600*miB},
		Workers: 2, Stagger: []time.Duration{0, 150 * time.Millisecond},
		Next: queue([]*trace.Trace{tr}, []*trace.Trace{tr}), Done: collect(&rs),
	})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, 1, rs[0].Worker)
	assert.Equal(t, workers.Failed, rs[0].Outcome)
	assert.Contains(t, rs[0].Err, "CUDA context")
	assert.Equal(t, workers.Completed, rs[1].Outcome)
	assert.Equal(t, 1, sum.Failed)
}

func TestBadTraceNamesTaskAndEvent(t *testing.T) {
	b := newBuild("bad", time.Millisecond)
	b.alloc(1 * miB)
	b.add(trace.Event{Action: trace.ActionFreeRequested, Addr: 0xdead})
	tr := b.done()
	_, err := workers.Run(workers.Options{GPU: onGPU(1 * giB), Workers: 1, Next: queue([]*trace.Trace{tr})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "task 1 (bad): event 2: free of unknown address 0xdead")
}

func TestDoneErrorStopsTheRun(t *testing.T) {
	tr := simple("t", time.Millisecond, 1*miB)
	boom := errors.New("disk full")
	n := 0
	_, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1, Next: queue([]*trace.Trace{tr, tr, tr}),
		Done: func(workers.TaskResult) error { n++; return boom },
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 1, n)
}

func TestBadOptions(t *testing.T) {
	next := queue()
	for _, o := range []workers.Options{
		{GPU: onGPU(giB), Workers: 0, Next: next},
		{GPU: onGPU(giB), Workers: 1},
		{GPU: onGPU(giB), Workers: 1, Next: next, Compute: workers.Compute{Share: 1.5}},
		{GPU: onGPU(giB), Workers: 1, Next: next, Policy: workers.Policy{OnOOM: "retry"}},
		{GPU: onGPU(giB), Workers: 1, Next: next, Stagger: []time.Duration{-1}},
		{GPU: gpu.Options{}, Workers: 1, Next: next},
	} {
		_, err := workers.Run(o)
		assert.Error(t, err, "%+v", o)
	}
}

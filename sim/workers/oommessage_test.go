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

// Two processes share the GPU and one runs out of memory: its message says
// what each process holds, as PyTorch's does with NVML; and the trial's
// UnallocatedAtOOM is the message's "reserved but unallocated" at that
// moment, not what the cache held at the trial's end.
func TestOOMWhileSharingNamesEveryProcess(t *testing.T) {
	// Worker 0 holds 600 MiB for 100 ms; worker 1 frees a 100 MiB block
	// (its cache keeps the segment), keeps a small one, and then asks for
	// 500 MiB.
	h := newBuild("hog", time.Microsecond)
	held := h.alloc(600 * miB)
	h.step = (100 * time.Millisecond).Microseconds()
	h.free(held)
	hog := h.done()
	b := newBuild("victim", time.Millisecond)
	a := b.alloc(100 * miB)
	small := b.alloc(512 * kiB)
	b.free(a)
	b.alloc(500 * miB)
	b.free(small)
	victim := b.done()
	var rs []workers.TaskResult
	_, err := workers.Run(workers.Options{
		GPU: gpu.Options{Capacity: 1 * giB, ContextOverhead: 100 * miB}, Workers: 2,
		Next: queue([]*trace.Trace{hog}, []*trace.Trace{victim}), Done: collect(&rs),
	})
	require.NoError(t, err)
	var v workers.TaskResult
	for _, r := range rs {
		if r.Task.Label == "victim" {
			v = r
		}
	}
	require.Equal(t, workers.PrunedOOM, v.Outcome, v.Err)
	assert.Contains(t, v.Err, "Process 1000 has 700.00 MiB memory in use. ")
	assert.Contains(t, v.Err, "Including non-PyTorch memory, this process has ")
	assert.Regexp(t, `is free\. Process 1000 has .* memory in use\. Including non-PyTorch memory, this process has .* memory in use\. Of the allocated memory`, v.Err)
	assert.Contains(t, v.Err, "this process has 102.00 MiB memory in use")
	// At the OOM the victim held its 512 KiB block in a 2 MiB small-pool
	// segment, and the retry had released the cached 100 MiB segment:
	// 1.5 MiB reserved but unallocated, as the message says. At its end
	// the whole 2 MiB segment is free in the cache.
	assert.Equal(t, 2*miB-512*kiB, v.UnallocatedAtOOM)
	assert.Contains(t, v.Err, "and 1.50 MiB is reserved by PyTorch but unallocated")
	assert.Equal(t, 2*miB, v.ReservedUnallocated)
}

// A process alone gets the message without per-process clauses.
func TestOOMAloneHasNoProcessClause(t *testing.T) {
	big := simple("big", time.Millisecond, 300*miB, 900*miB)
	var rs []workers.TaskResult
	_, err := workers.Run(workers.Options{GPU: onGPU(1 * giB), Workers: 1, Next: queue([]*trace.Trace{big}), Done: collect(&rs)})
	require.NoError(t, err)
	require.Equal(t, workers.PrunedOOM, rs[0].Outcome)
	assert.NotContains(t, rs[0].Err, "memory in use")
	assert.Zero(t, rs[0].UnallocatedAtOOM, "the 300 MiB block is allocated at the OOM, and nothing else is reserved")
}

package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// A stitched block is taken apart, and its object recycled, as soon as
// its Free completes: the worker must count the bytes it frees from what
// it knew before the Free. Read after it, they were 0, and the run's live
// bytes stayed 20 MiB too high for the rest of the run.
func TestStitchedFreeCountsItsBytes(t *testing.T) {
	b := newBuild("stitch", time.Millisecond)
	x := b.alloc(10 * miB)
	k1 := b.alloc(2 * miB)
	y := b.alloc(10 * miB)
	k2 := b.alloc(2 * miB)
	b.free(x)
	b.free(y)
	c := b.alloc(20 * miB) // no free block is large enough: the two holes' pages, stitched
	b.free(c)
	d := b.alloc(30 * miB)
	b.free(d)
	b.free(k1)
	b.free(k2)
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: onGPU(1 * giB), Workers: 1, AllocPolicy: allocator.Stitch{},
		Next: queue([]*trace.Trace{b.done()}), Done: collect(&rs),
	})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, workers.Completed, rs[0].Outcome)
	assert.Equal(t, 34*miB, sum.PeakLive, "the 30 MiB block beside the two 2 MiB keepers")
}

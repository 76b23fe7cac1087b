package profiler_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/trace"
)

// TestLayoutAtPeak checks the segment map of a hand-worked state: a 20 MiB
// segment cut for a 3 MiB request (between 1 and 10 MiB: the 20 MiB
// size class), then 4 MiB split from its rest, with the first freed after
// the peak. The layout at the peak
// must show both blocks, the free tail, and the sites.
func TestLayoutAtPeak(t *testing.T) {
	p := profiler.New(stacksFor("a", "b"), profiler.Options{})
	r := newRig(t, p, 0, 1<<30, "")
	require.True(t, r.malloc("a", 3*MiB, 1))
	require.True(t, r.malloc("b", 4*MiB, 2))
	r.free("a")
	prof := p.Finish()
	require.NotNil(t, prof.Peak)
	lay := prof.Peak.Layout
	require.Len(t, lay, 1)
	seg := lay[0]
	assert.Equal(t, uint64(20*MiB), seg.Size)
	assert.False(t, seg.Expandable)
	require.Len(t, seg.Blocks, 2)
	assert.Equal(t, profiler.BlockLayout{Offset: 0, Size: 3 * MiB, Allocated: true, Stack: 1}, seg.Blocks[0])
	assert.Equal(t, profiler.BlockLayout{Offset: 3 * MiB, Size: 4 * MiB, Allocated: true, Stack: 2}, seg.Blocks[1])
	// The figures are the layout's: 13 MiB free in one gap, all stranded.
	assert.Equal(t, uint64(13*MiB), prof.Peak.FreeBytes)
	assert.Equal(t, uint64(13*MiB), prof.Peak.StrandedBytes)
}

// TestLayoutExpandable: with expandable segments the layout lists the
// mapped run, flagged expandable: two 20 MiB pages for a 30 MiB block.
func TestLayoutExpandable(t *testing.T) {
	p := profiler.New(stacksFor("a"), profiler.Options{})
	r := newRig(t, p, 0, 1<<30, "expandable_segments:True")
	require.True(t, r.malloc("a", 30*MiB, 1))
	prof := p.Finish()
	require.Len(t, prof.Peak.Layout, 1)
	seg := prof.Peak.Layout[0]
	assert.True(t, seg.Expandable)
	assert.Equal(t, uint64(40*MiB), seg.Size)
	require.Len(t, seg.Blocks, 1)
	assert.Equal(t, uint64(30*MiB), seg.Blocks[0].Size)
}

// TestRetriesAndTimes: a request that only fits after the cache is
// released is a retry, dated at its event; samples carry the events'
// recorded times.
func TestRetriesAndTimes(t *testing.T) {
	p := profiler.New(stacksFor("a", "b", "c"), profiler.Options{})
	r := newRig(t, p, 0, 100*MiB, "")
	step := func(us int64) { p.Step(*r.idx, &trace.Event{TimeUS: us}); *r.idx++ }
	alloc := func(name string, size uint64, us int64) {
		b, err := r.a.Malloc(size, 0)
		require.NoError(t, err)
		r.blocks[name] = b
		p.Alloc(0, *r.idx, b, 1)
		step(us)
	}
	alloc("a", 60*MiB, 1000)
	p.Free(0, *r.idx, r.blocks["a"], 1)
	require.NoError(t, r.a.Free(r.blocks["a"]))
	step(2000)
	// 60 MiB cached, 70 MiB wanted: only after releasing the cache.
	alloc("b", 70*MiB, 3000)
	step(0) // an event without a time keeps the last one
	prof := p.Finish()
	assert.Equal(t, []profiler.Retry{{Event: 2, Device: 0, Count: 1}}, prof.Retries)
	assert.Equal(t, int64(1), prof.Total.AllocRetries)
	require.NotEmpty(t, prof.Timeline)
	times := map[int64]int64{}
	for _, s := range prof.Timeline {
		times[s.Event] = s.TimeUS
	}
	assert.Equal(t, map[int64]int64{0: 1000, 1: 2000, 2: 3000, 3: 3000}, times)
}

package profiler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The detail ring is allocated as it fills: a trace shorter than the
// window never gets the whole window's ring.
func TestDetailRingGrowsAsItFills(t *testing.T) {
	d := newDetail(16384, 0)
	c := &counters{peakLiveEvent: -1}
	for i := int64(0); i < 100; i++ {
		c.live = uint64(i)
		d.step(i, 0, c)
	}
	require.Len(t, d.ring, 100)
	require.Less(t, cap(d.ring), 1024)
	for i := int64(100); i < 20000; i++ {
		d.step(i, 0, c)
	}
	require.Len(t, d.ring, 16384, "full length once it wraps")
	require.True(t, d.full)
}

// Told how many events to expect, the ring is made once at that length
// (fewer than the window) and never copied; past the count it grows as
// before.
func TestDetailRingSizedForExpected(t *testing.T) {
	d := newDetail(16384, 300)
	c := &counters{peakLiveEvent: -1}
	for i := int64(0); i < 300; i++ {
		c.live = uint64(i)
		d.step(i, 0, c)
	}
	require.Len(t, d.ring, 300)
	require.Equal(t, 300, cap(d.ring))
	for i := int64(300); i < 20000; i++ {
		d.step(i, 0, c)
	}
	require.Len(t, d.ring, 16384)
	require.True(t, d.full)
	require.Equal(t, 16384, cap(newDetail(16384, 1<<40).ring), "never more than the window")
}

// The first window handed out is the kept window itself; a later keep
// (the replay going on) must not write into it, and a second window is a
// copy.
func TestDetailWindowNotShared(t *testing.T) {
	d := newDetail(8, 0)
	c := &counters{peakLiveEvent: -1}
	step := func(i int64, live uint64) {
		c.live = live
		if live > c.peakLive {
			c.peakLive, c.peakLiveEvent = live, i
		}
		d.step(i, 0, c)
	}
	for i := int64(0); i < 20; i++ {
		step(i, uint64(i))
	}
	first := d.window()
	require.NotEmpty(t, first)
	want := append([]DetailPoint(nil), first...)
	second := d.window()
	second[0].LiveBytes = 999
	require.Equal(t, want, first, "a second window is a copy")
	for i := int64(20); i < 60; i++ {
		step(i, uint64(i)) // new peaks: windows kept again
	}
	require.NotEqual(t, want, d.window())
	require.Equal(t, want, first, "the replay went on")
}

// A window is kept with one allocation at the ring's length, not two
// appends' worth (the ring's tail, then its head, reallocated).
func TestDetailKeepAllocatesOnce(t *testing.T) {
	d := newDetail(1000, 0)
	c := &counters{peakLiveEvent: -1}
	for i := int64(0); i < 1500; i++ { // wrapped: the oldest point is mid-ring
		d.step(i, 0, c)
	}
	require.True(t, d.full)
	require.NotZero(t, d.next)
	allocs := testing.AllocsPerRun(10, func() {
		d.kept, d.given = nil, false
		d.keep()
	})
	require.Equal(t, 1.0, allocs)
	require.Len(t, d.kept, 1000)
	require.Equal(t, int64(500), d.kept[0].Event, "oldest first")
	require.Equal(t, int64(1499), d.kept[999].Event)
}

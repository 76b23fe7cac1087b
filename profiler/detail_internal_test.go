package profiler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The detail ring is allocated as it fills: a trace shorter than the
// window never gets the whole window's ring.
func TestDetailRingGrowsAsItFills(t *testing.T) {
	d := newDetail(16384)
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

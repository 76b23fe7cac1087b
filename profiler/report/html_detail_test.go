package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/memreplay/memreplay/profiler"
)

// TestTimelineDetail: the window's points replace the samples that end
// inside it, except one whose interval begins before the window (its
// maxima cover events the window lacks): it stays, and the points up to
// its end go.
func TestTimelineDetail(t *testing.T) {
	var samples []profiler.Sample
	for e := int64(9); e < 100; e += 10 { // intervals 0..9, 10..19, ...
		samples = append(samples, profiler.Sample{Event: e, TimeUS: 7 * e, MaxLiveBytes: 1000 + uint64(e), LiveBytes: 500,
			RequestedBytes: 400, ReservedBytes: 600, MaxReservedBytes: 2000 + uint64(e), FreeBytes: 3, LargestFreeBlock: 2})
	}
	window := func(first, last int64) []profiler.DetailPoint {
		var d []profiler.DetailPoint
		for e := first; e <= last; e++ {
			d = append(d, profiler.DetailPoint{Event: e, TimeUS: 7*e + 1, LiveBytes: uint64(e), ReservedBytes: 2 * uint64(e),
				RequestedBytes: uint64(e) - 1})
		}
		return d
	}
	seq := func(first, last int64) []int64 {
		var s []int64
		for e := first; e <= last; e++ {
			s = append(s, e)
		}
		return s
	}
	cat := func(parts ...[]int64) []int64 {
		var s []int64
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	for _, c := range []struct {
		name        string
		first, last int64
		want        []int64
		from, to    int
	}{
		{"straddled start: sample 29 stays", 25, 64, cat([]int64{9, 19, 29}, seq(30, 64), []int64{69, 79, 89, 99}), 3, 38},
		{"aligned start", 20, 64, cat([]int64{9, 19}, seq(20, 64), []int64{69, 79, 89, 99}), 2, 47},
		{"inside one interval", 21, 27, cat([]int64{9, 19}, seq(21, 27), []int64{29, 39, 49, 59, 69, 79, 89, 99}), 2, 9},
		{"from the first event to the end", 0, 99, seq(0, 99), 0, 100},
		{"the straddling sample is the window's last event", 25, 29, []int64{9, 19, 29, 39, 49, 59, 69, 79, 89, 99}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := timelineColumns(&profiler.Profile{Timeline: samples, PeakDetail: window(c.first, c.last)})
			assert.Equal(t, c.want, tl.Event)
			assert.Equal(t, [2]int{c.from, c.to}, tl.Detail)
			n := len(tl.Event)
			for _, col := range [][]uint64{tl.Live, tl.MaxLive, tl.Requested, tl.Reserved, tl.MaxReserved, tl.Free, tl.LargestFree} {
				assert.Len(t, col, n)
				assert.Equal(t, n, cap(col), "a column cannot grow into the next")
			}
			assert.Len(t, tl.TimeUS, n)
			for i, e := range tl.Event {
				got := [8]uint64{uint64(tl.TimeUS[i]), tl.Live[i], tl.MaxLive[i], tl.Requested[i], tl.Reserved[i], tl.MaxReserved[i],
					tl.Free[i], tl.LargestFree[i]}
				if i >= tl.Detail[0] && i < tl.Detail[1] {
					assert.Equal(t, [8]uint64{uint64(7*e + 1), uint64(e), uint64(e), uint64(e) - 1, 2 * uint64(e), 2 * uint64(e), 0, 0}, got)
				} else {
					assert.Equal(t, [8]uint64{uint64(7 * e), 500, 1000 + uint64(e), 400, 600, 2000 + uint64(e), 3, 2}, got,
						"sample %d kept whole", e)
				}
			}
		})
	}
}

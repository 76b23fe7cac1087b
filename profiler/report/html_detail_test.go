package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/memreplay/memreplay/profiler"
)

// TestWithDetail: the window's points replace the samples that end inside
// it, except one whose interval begins before the window (its maxima
// cover events the window lacks): it stays, and the points up to its end
// go.
func TestWithDetail(t *testing.T) {
	var samples []profiler.Sample
	for e := int64(9); e < 100; e += 10 { // intervals 0..9, 10..19, ...
		samples = append(samples, profiler.Sample{Event: e, MaxLiveBytes: 1000 + uint64(e)})
	}
	window := func(first, last int64) []profiler.DetailPoint {
		var d []profiler.DetailPoint
		for e := first; e <= last; e++ {
			d = append(d, profiler.DetailPoint{Event: e, LiveBytes: uint64(e), ReservedBytes: 2 * uint64(e), RequestedBytes: uint64(e) - 1})
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
			out, r := withDetail(samples, window(c.first, c.last))
			var got []int64
			for _, s := range out {
				got = append(got, s.Event)
			}
			assert.Equal(t, c.want, got)
			assert.Equal(t, [2]int{c.from, c.to}, r)
			for i, s := range out {
				if i >= r[0] && i < r[1] {
					assert.Equal(t, profiler.Sample{Event: s.Event, LiveBytes: uint64(s.Event), MaxLiveBytes: uint64(s.Event),
						ReservedBytes: 2 * uint64(s.Event), MaxReservedBytes: 2 * uint64(s.Event), RequestedBytes: uint64(s.Event) - 1}, s)
				} else {
					assert.Equal(t, 1000+uint64(s.Event), s.MaxLiveBytes, "sample %d kept whole", s.Event)
				}
			}
		})
	}
}

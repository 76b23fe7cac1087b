package profiler_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
)

// sawtooth drives a rig through climbs of 1 MiB blocks, each climb
// allocating heights[i] blocks and then freeing them: the highest climb's
// last allocation is the peak of live bytes.
func sawtooth(r *rig, heights []int) {
	for c, h := range heights {
		for i := 0; i < h; i++ {
			r.malloc(fmt.Sprintf("c%d.%d", c, i), MiB+uint64(i)*512, 1)
		}
		for i := h - 1; i >= 0; i-- {
			r.free(fmt.Sprintf("c%d.%d", c, i))
		}
	}
}

// TestPeakDetail: the window holds the state after every event around the
// peak, exactly as a timeline sampled at every event has it, while the
// timeline itself stays thinned.
func TestPeakDetail(t *testing.T) {
	for _, c := range []struct {
		name    string
		heights []int
		window  int
	}{
		{"peak in the middle", []int{40, 300, 60, 40, 40, 40}, 200},
		{"a later, higher peak replaces the first", []int{200, 40, 40, 250, 40, 40}, 100},
		{"peak near the start", []int{30, 10, 10, 10, 10, 10, 10}, 200},
		{"peak near the end", []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 120}, 400},
		{"window longer than the trace", []int{20, 30}, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			full := profiler.New(nil, profiler.Options{MaxSamples: 1 << 20})
			sawtooth(newRig(t, full, 0, 1<<34, ""), c.heights)
			want := full.Finish()
			require.Equal(t, int64(1), want.SampleEvery)

			p := profiler.New(nil, profiler.Options{MaxSamples: 16, DetailEvents: c.window})
			sawtooth(newRig(t, p, 0, 1<<34, ""), c.heights)
			prof := p.Finish()
			assert.LessOrEqual(t, len(prof.Timeline), 16, "the timeline stays thinned")
			d := prof.PeakDetail
			require.NotEmpty(t, d)
			peak := prof.Total.PeakLiveEvent
			assert.Equal(t, want.Total.PeakLiveEvent, peak)
			assert.Equal(t, min(c.window, int(prof.Events)), len(d), "a full window, or the whole trace")
			// Centred on the peak, unless the trace's start or end cuts it.
			first, last := d[0].Event, d[len(d)-1].Event
			assert.Equal(t, max(0, min(peak-int64(c.window/2)+1, prof.Events-int64(c.window))), first)
			assert.LessOrEqual(t, first, peak)
			assert.GreaterOrEqual(t, last, peak)
			for i, pt := range d {
				require.Equal(t, first+int64(i), pt.Event, "every event, in order")
				s := want.Timeline[pt.Event]
				require.Equal(t, pt.Event, s.Event)
				assert.Equal(t, s.LiveBytes, pt.LiveBytes, "event %d", pt.Event)
				assert.Equal(t, s.ReservedBytes, pt.ReservedBytes, "event %d", pt.Event)
				assert.Equal(t, s.RequestedBytes, pt.RequestedBytes, "event %d", pt.Event)
				if pt.Event == peak {
					assert.Equal(t, prof.Total.PeakLiveBytes, pt.LiveBytes)
				}
			}
		})
	}
}

// TestPeakDetailOff: no window unless asked for, and none for several
// devices (the page's device columns have no per-event values).
func TestPeakDetailOff(t *testing.T) {
	p := profiler.New(nil, profiler.Options{MaxSamples: 16})
	sawtooth(newRig(t, p, 0, 1<<34, ""), []int{10, 20})
	assert.Nil(t, p.Finish().PeakDetail)

	p = profiler.New(nil, profiler.Options{MaxSamples: 16, DetailEvents: 50})
	r0, r1 := newRig(t, p, 0, 1<<34, ""), newRig(t, p, 1, 1<<34, "")
	r1.idx = r0.idx
	sawtooth(r0, []int{10, 20})
	sawtooth(r1, []int{30})
	assert.Nil(t, p.Finish().PeakDetail)
}

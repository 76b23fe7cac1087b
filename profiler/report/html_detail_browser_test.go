package report_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// sawtoothTrace records climbs of 1 MiB blocks, each allocated then freed;
// climb 37 goes twice as high: the peak.
func sawtoothTrace(t *testing.T) *trace.Trace {
	t.Helper()
	cfg := config.Default()
	a := newAllocator(t, 8<<30, cfg)
	st := trace.NewStacks()
	s := st.Intern([]trace.Frame{{Name: "forward", Filename: "/src/model.py", Line: 20}})
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "sawtooth.mrt",
		AllocatorSettings: cfg.AllocatorSettings(), Devices: []trace.Device{{Index: 0, Capacity: 8 << 30}}}, Stacks: st}
	rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	rec.SetStack(s)
	for c := 0; c < 60; c++ {
		h := 40
		if c == 37 {
			h = 80
		}
		var bs []*allocator.Block
		for i := 0; i < h; i++ {
			b, err := a.Malloc(MiB+uint64(i)*4096, 0)
			require.NoError(t, err)
			bs = append(bs, b)
		}
		for i := len(bs) - 1; i >= 0; i-- {
			require.NoError(t, a.Free(bs[i]))
		}
	}
	rec.Stop()
	return tr
}

// TestBrowserPeakDetail: on a timeline thinned to a sample every few dozen
// events, zooming into the peak draws every event there (the profiler's
// window around the peak), and the whole timeline is still drawn at most
// two points per pixel column. Without the window the same zoom has a
// handful of points.
func TestBrowserPeakDetail(t *testing.T) {
	tr := sawtoothTrace(t)
	p := profiler.New(tr.Stacks, profiler.Options{MaxSamples: 100, DetailEvents: 600})
	res, err := replay.Run(tr.NewReader(), replay.Options{Name: tr.Header.SourceFile, Recorder: p})
	require.NoError(t, err)
	prof := p.Finish()
	require.Greater(t, prof.SampleEvery, int64(32), "a thinned timeline")
	require.Len(t, prof.PeakDetail, 600)
	peak := prof.Total.PeakLiveEvent
	in := &report.Input{Trace: tr.Header, Result: res, Profile: prof, Stacks: tr.Stacks}
	r := &report.HTMLReport{Runs: []report.HTMLRun{{Label: "sawtooth", Input: in}}}

	sc, _ := render(t, r, "peak-detail", "")
	for name, n := range seriesPoints(t, sc.Chart("timeline-0")) {
		assert.LessOrEqual(t, n, 2*1100, name)
	}

	// The 201 events around the peak, and the point before them so that
	// the lines reach the left edge (the window holds it too).
	zoom := fmt.Sprintf("zoom=%d,%d", peak-100, peak+100)
	sc, dom := render(t, r, "peak-detail-zoomed", zoom)
	assert.Equal(t, map[string]int{"reserved": 202, "live (allocated)": 202, "requested": 202}, seriesPoints(t, sc.Chart("timeline-0")))
	assert.Contains(t, dom, fmt.Sprintf("showing events %d to %d", peak-100, peak+100))

	coarse := *prof
	coarse.PeakDetail = nil
	in2 := *in
	in2.Profile = &coarse
	sc, _ = render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "sawtooth", Input: &in2}}}, "peak-coarse-zoomed", zoom)
	for name, n := range seriesPoints(t, sc.Chart("timeline-0")) {
		assert.Less(t, n, 12, "%s: the samples alone", name)
	}
}

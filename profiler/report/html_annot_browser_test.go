package report_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
)

// TestBrowserAnnotationMarkers: a snapshot's record_function annotations
// are drawn on the timeline, where its OOMs and retries would be: one
// marker each (this trace has no OOM or retry), named with its stage.
func TestBrowserAnnotationMarkers(t *testing.T) {
	browser(t)
	const path = "../../traces/pytorch/cs336_silmont2000_memory_forward_fp32_128.pickle"
	o, _, err := replay.OpenPrepared(path)
	require.NoError(t, err)
	defer o.Close()
	p := profiler.New(o.Reader.Stacks(), profiler.Options{ExpectedEvents: o.Packed.Events.Len(), MaxSamples: report.HTMLTimelineSamples})
	res, err := replay.Run(o.Reader, replay.Options{Name: path, Recorder: p})
	require.NoError(t, err)
	in := &report.Input{Trace: o.Reader.Header(), Result: res, Profile: p.Finish(), Stacks: o.Reader.Stacks()}
	require.Empty(t, res.OOMs)
	require.Empty(t, in.Profile.Retries)
	require.Len(t, in.Profile.Markers, 2)

	sc, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}, "annotations", "")
	c := sc.Chart("timeline-0")
	require.NotNil(t, c)
	assert.Equal(t, 2, c.Markers)
	assert.Contains(t, dom, "Optimizer.zero_grad#AdamW.zero_grad START at event 0")
	assert.Contains(t, dom, "Optimizer.zero_grad#AdamW.zero_grad END at event 0")
}

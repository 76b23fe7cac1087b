package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
)

// A snapshot's external_annotations reach the report as the timeline's
// markers: in the profile, the JSON report and the page's data, with their
// stages; a trace without markers has no "markers" key (its JSON is as it
// was).
func TestReportAnnotationMarkers(t *testing.T) {
	in := realInput(t, "../../traces/pytorch/cs336_silmont2000_memory_forward_fp32_128.pickle", nil)
	want := []profiler.Marker{
		{Event: 0, Device: 0, TimeUS: 1772552953882198, Label: "Optimizer.zero_grad#AdamW.zero_grad", Stage: "START"},
		// Both before the first entry (beside the events, they no longer
		// take event indices of their own: the END was event 1).
		{Event: 0, Device: 0, TimeUS: 1772552953882257, Label: "Optimizer.zero_grad#AdamW.zero_grad", Stage: "END"},
	}
	require.Len(t, in.Profile.Markers, 2)
	for i := range want {
		m := in.Profile.Markers[i]
		assert.Equal(t, want[i], profiler.Marker{Event: m.Event, Device: m.Device, TimeUS: m.TimeUS, Label: m.Label, Stage: m.Stage})
	}

	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, in))
	var doc struct {
		Markers []map[string]any `json:"markers"`
		Notes   []string         `json:"notes"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	require.Len(t, doc.Markers, 2)
	assert.Equal(t, map[string]any{"event": 0.0, "device": 0.0, "time_us": 1772552953882198.0,
		"label": "Optimizer.zero_grad#AdamW.zero_grad", "stage": "START"}, doc.Markers[0])
	for _, n := range doc.Notes {
		assert.NotContains(t, n, "external_annotations")
	}

	d, err := buildHTMLData(&HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: in}}})
	require.NoError(t, err)
	var page bytes.Buffer
	require.NoError(t, WriteHTML(&page, &HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: in}}}))
	assert.Contains(t, page.String(), `"markers":[{"event":0,"device":0,"time_us":1772552953882198,"label":"Optimizer.zero_grad#AdamW.zero_grad","stage":"START"}`)
	requireAsMarshal(t, d, "annotated")

	// Beyond the cap: the JSON says how many were left out, and a note
	// says it in words (the table, the page).
	capped := *in
	prof := *in.Profile
	prof.Markers, prof.MarkersDropped = prof.Markers[:1], 1
	capped.Profile = &prof
	buf.Reset()
	require.NoError(t, WriteJSON(&buf, &capped))
	var cdoc struct {
		Markers        []map[string]any `json:"markers"`
		MarkersDropped int64            `json:"markers_dropped"`
		Notes          []string         `json:"notes"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &cdoc))
	assert.Len(t, cdoc.Markers, 1)
	assert.Equal(t, int64(1), cdoc.MarkersDropped)
	assert.Contains(t, cdoc.Notes, "1 record_function annotations beyond the first 1 not shown")
	assert.NotContains(t, bufString(t, in), `"markers_dropped"`)

	plain := realInput(t, "../../traces/pytorch/cs336_silmont2000_mem_snapshot.pickle", nil)
	assert.Empty(t, plain.Profile.Markers)
	buf.Reset()
	require.NoError(t, WriteJSON(&buf, plain))
	assert.False(t, strings.Contains(buf.String(), `"markers"`))
}

// bufString is in's JSON report.
func bufString(t *testing.T, in *Input) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, in))
	return b.String()
}

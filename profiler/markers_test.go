package profiler_test

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// stepMarkedTrace is a trial-like trace: steps markers of memreplay's own
// ("step N", a stack each, not an annotation's shape), each after an
// alloc and its free, then two ≈2.4 record_function markers (a
// user_defined entry's one frame {filename: range, line: 0, name: stage}).
func stepMarkedTrace(steps int) *trace.Trace {
	st := trace.NewStacks()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: st}
	add := func(e trace.Event) { e.TimeUS = int64(len(tr.Events)); tr.Events = append(tr.Events, e) }
	for i := range steps {
		add(trace.Event{Action: trace.ActionAlloc, Addr: 0x7f0000000000, Size: 4096})
		add(trace.Event{Action: trace.ActionFreeRequested, Addr: 0x7f0000000000, Size: 4096})
		add(trace.Event{Action: trace.ActionFreeCompleted, Addr: 0x7f0000000000, Size: 4096})
		label := fmt.Sprintf("step %d", i)
		add(trace.Event{Action: trace.ActionMarker, Label: label, Stack: st.Intern([]trace.Frame{{Filename: "memreplay", Name: label}})})
	}
	for _, stage := range []string{"START", "END"} {
		add(trace.Event{Action: trace.ActionMarker, Label: "fwd", Stack: st.Intern([]trace.Frame{{Filename: "fwd", Name: stage}})})
	}
	return tr
}

// The profiler's own cap on annotations: memreplay's step markers, which
// have stacks, no longer fill the list before a trace's annotations
// (Profile.Markers had none of them with 1,500 steps before, and
// markers_dropped counted the step markers), whether the stacks are
// readable as the markers come or only at Finish (the speculative
// replay's table).
func TestMarkerCapCountsOnlyAnnotations(t *testing.T) {
	tr := stepMarkedTrace(1500)
	want := []profiler.Marker{
		{Event: 6000, TimeUS: 6000, Label: "fwd", Stage: "START"},
		{Event: 6001, TimeUS: 6001, Label: "fwd", Stage: "END"},
	}
	for _, late := range []bool{false, true} {
		stacks := tr.Stacks
		if late {
			stacks = trace.NewStacks() // filled after the replay
		}
		p := profiler.New(stacks, profiler.Options{})
		_, err := replay.RunTrace(tr, replay.Options{Recorder: p})
		require.NoError(t, err)
		if late {
			*stacks = *tr.Stacks
		}
		prof := p.Finish()
		assert.Equal(t, want, markersOf(prof), "late %v", late)
		assert.Zero(t, prof.MarkersDropped, "late %v", late)
	}
}

func markersOf(prof *profiler.Profile) []profiler.Marker {
	var out []profiler.Marker
	for _, m := range prof.Markers {
		out = append(out, profiler.Marker{Event: m.Event, Device: m.Device, TimeUS: m.TimeUS, Label: m.Label, Stage: m.Stage})
	}
	return out
}

// Annotations beside the events (trace.Annotation) are listed with the
// annotation markers in event order (one before event N ahead of the
// marker that is event N), under Options.MaxAnnotations, the earliest
// first; MarkersDropped counts the rest; replay.Run hands them over.
func TestMarkerAnnotationsBeside(t *testing.T) {
	tr := stepMarkedTrace(3)
	tr.Annotations = []trace.Annotation{
		{Device: 0, TimeUS: 0, Name: "zero_grad", Stage: "START", Event: 0},
		{Device: 0, TimeUS: 12, Name: "opt", Stage: "START", Event: 12},
		{Device: 0, TimeUS: 20, Name: "opt", Stage: "END", Event: 14},
	}
	p := profiler.New(tr.Stacks, profiler.Options{})
	_, err := replay.RunTrace(tr, replay.Options{Recorder: p})
	require.NoError(t, err)
	prof := p.Finish()
	assert.Equal(t, []profiler.Marker{
		{Event: 0, TimeUS: 0, Label: "zero_grad", Stage: "START"},
		{Event: 12, TimeUS: 12, Label: "opt", Stage: "START"},
		{Event: 12, TimeUS: 12, Label: "fwd", Stage: "START"},
		{Event: 13, TimeUS: 13, Label: "fwd", Stage: "END"},
		{Event: 14, TimeUS: 20, Label: "opt", Stage: "END"},
	}, markersOf(prof))
	assert.Zero(t, prof.MarkersDropped)

	// The cap is the annotations' own: 1,500 step markers and 3 + 2
	// annotations under a cap of 4 drop one.
	tr = stepMarkedTrace(1500)
	tr.Annotations = []trace.Annotation{
		{Device: 0, TimeUS: 1, Name: "a", Stage: "START", Event: 1},
		{Device: 0, TimeUS: 2, Name: "a", Stage: "END", Event: 2},
		{Device: 0, TimeUS: 9000, Name: "z", Stage: "END", Event: 6002},
	}
	p = profiler.New(tr.Stacks, profiler.Options{MaxAnnotations: 4})
	_, err = replay.RunTrace(tr, replay.Options{Recorder: p})
	require.NoError(t, err)
	prof = p.Finish()
	assert.Equal(t, []string{"a", "a", "fwd", "fwd"}, labelsOf(prof))
	assert.EqualValues(t, 1, prof.MarkersDropped)
}

func labelsOf(prof *profiler.Profile) []string {
	var out []string
	for _, m := range prof.Markers {
		out = append(out, m.Label)
	}
	return out
}

// A snapshot's millions of annotations beside the events: Finish lists
// the MaxAnnotations earliest by event (then device, then the list's
// order), the same as sorting them all would, counts the rest, and holds
// no Marker for each of them (before, a Marker each was made and sorted:
// about 80 MB here).
func TestMarkerAnnotationsBesideMillions(t *testing.T) {
	const n = 1 << 20
	tr := stepMarkedTrace(2) // 10 events, two of them ≈2.4 markers
	ann := make([]trace.Annotation, n)
	for i := range ann {
		// Time order across two devices: device 1's come before event
		// 10 (after device 0's last), device 0's spread over its events.
		dev := int32(i % 2)
		ev := int64(10)
		if dev == 0 {
			ev = int64(i/2) * 10 / (n / 2)
		}
		ann[i] = trace.Annotation{Device: dev, TimeUS: int64(i), Name: "r", Stage: []string{"START", "END"}[i/2%2], Event: ev}
	}
	tr.Annotations = ann
	const limit = 1000
	p := profiler.New(tr.Stacks, profiler.Options{MaxAnnotations: limit})
	_, err := replay.RunTrace(tr, replay.Options{Recorder: p})
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	prof := p.Finish()
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "bytes allocated by Finish")

	var want []profiler.Marker
	byEvent := slices.Clone(ann)
	slices.SortStableFunc(byEvent, func(a, b trace.Annotation) int {
		return cmp.Or(cmp.Compare(a.Event, b.Event), cmp.Compare(a.Device, b.Device))
	})
	for _, a := range byEvent {
		want = append(want, profiler.Marker{Event: a.Event, Device: a.Device, TimeUS: a.TimeUS, Label: a.Name, Stage: a.Stage})
	}
	// The two ≈2.4 markers are events 8 and 9: after the annotations
	// before them.
	require.Len(t, markersOf(prof), limit)
	assert.Equal(t, want[:limit], markersOf(prof))
	assert.EqualValues(t, n+2-limit, prof.MarkersDropped)
}

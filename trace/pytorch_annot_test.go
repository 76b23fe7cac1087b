package trace

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptAnnot(stage, name string, device, timeUS any, more ...pkv) pdict {
	d := pdict{{"stage", stage}, {"name", name}, {"device", device}, {"time_us", timeUS}}
	return append(d, more...)
}

// annotatedPTSnapshot has external_annotations before, inside and after
// the entries of three devices, and on a fourth with no trace list.
func annotatedPTSnapshot() pdict {
	at := func(action string, addr, size, t int) pdict { return ptEntry(action, addr, size, pkv{"time_us", t}) }
	return pdict{
		{"segments", plist{}},
		{"device_traces", plist{
			plist{
				at("alloc", 0xa00, 512, 100),
				at("free_requested", 0xa00, 512, 110),
				at("free_completed", 0xa00, 512, 112),
				at("alloc", 0xb00, 512, 120),
				at("alloc", 0xc00, 512, 130),
				at("free_requested", 0xb00, 512, 140),
			},
			plist{at("alloc", 0xd00, 512, 50)},
			plist{},
		}},
		{"allocator_settings", pdict{{"expandable_segments", false}}},
		// Not in time order for device 0; device 3 has no list.
		{"external_annotations", plist{
			ptAnnot("END", "fwd", 0, 200),
			ptAnnot("START", "fwd", 0, 90),
			ptAnnot("START", "y", 3, 5),
			ptAnnot("END", "inner", 0, 111, pkv{"extra", plist{}}),
			ptAnnot("START", "step", 0, 120),
			ptAnnot("END", "step", 0, 130),
			ptAnnot("END", "x", 1, 10),
		}},
	}
}

// annotationFrame is the one frame of ≈2.4's user_defined record_function
// entries: {filename: the range, line: 0, name: the stage}.
func annotationFrame(stage, name string) Frame { return Frame{Filename: name, Name: stage} }

// wantAnnotatedPT is annotatedPTSnapshot's list read: in time order, each
// placed before the first entry of its device it does not follow.
var wantAnnotatedPT = []Annotation{
	{Device: 3, TimeUS: 5, Name: "y", Stage: "START", Event: 7},     // no list: after every event
	{Device: 1, TimeUS: 10, Name: "x", Stage: "END", Event: 6},      // before device 1's alloc at 50
	{Device: 0, TimeUS: 90, Name: "fwd", Stage: "START", Event: 0},  // before the alloc at 100
	{Device: 0, TimeUS: 111, Name: "inner", Stage: "END", Event: 2}, // inside the free: nothing moves it
	{Device: 0, TimeUS: 120, Name: "step", Stage: "START", Event: 3},
	{Device: 0, TimeUS: 130, Name: "step", Stage: "END", Event: 5}, // after the alloc of its own time
	{Device: 0, TimeUS: 200, Name: "fwd", Stage: "END", Event: 6},  // after device 0's last entry
}

// The annotations are kept beside the events: the events are the
// snapshot's entries, with their entry indices, and each annotation says
// before which of them it falls; a device named only by annotations is one
// of the trace's. Before, they were marker events merged into the stream
// (the trace had 14 events, and an observed import restarted).
func TestReadPyTorchAnnotations(t *testing.T) {
	for _, cpp := range []bool{false, true} {
		data := encodePickle(annotatedPTSnapshot(), cpp)
		tr, err := readPT(t, data)
		require.NoError(t, err)
		checkPTTrace(t, tr)
		require.Len(t, tr.Events, 7)
		for _, e := range tr.Events {
			assert.NotEqual(t, ActionMarker, e.Action)
		}
		assert.Equal(t, wantAnnotatedPT, tr.Annotations)
		assert.Empty(t, tr.Header.Notes)
		assert.Equal(t, []Device{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}, tr.Header.Devices)
		assert.Equal(t, 1, tr.Stacks.NumStacks(), "annotations intern no stack")
		// The whole import gives the same trace as the streamed one.
		whole, err := wholeImport(data, "test.pickle")
		require.NoError(t, err)
		assert.Equal(t, tr, whole)

		// From a file, packed, with an observer: it sees the entries
		// once, and is never told to restart.
		path := filepath.Join(t.TempDir(), "a.pickle")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		obs := &recordingObserver{}
		p, err := ReadPyTorchObserved(path, obs)
		require.NoError(t, err)
		assert.Equal(t, wantAnnotatedPT, p.Annotations)
		got := p.Trace()
		assert.Equal(t, tr.Events, got.Events)
		assert.Equal(t, wantAnnotatedPT, got.Annotations)
		assert.Zero(t, obs.restarts)
		assert.Equal(t, got.Events, obs.events)
		assert.Equal(t, wantAnnotatedPT, AnnotationsOf(p.NewReader()))
		o, err := Open(path)
		require.NoError(t, err)
		assert.Equal(t, wantAnnotatedPT, o.Annotations())
		assert.Equal(t, wantAnnotatedPT, AnnotationsOf(o.Reader))
		o.Close()
	}
}

// PlaceAnnotations over events of several devices, ties and a time that
// steps back: each annotation is no earlier than the one before it on
// its device.
func TestPlaceAnnotations(t *testing.T) {
	ev := []Event{
		{Device: 0, TimeUS: 10}, {Device: 0, TimeUS: 20}, {Device: 0, TimeUS: 15}, {Device: 0, TimeUS: 20},
		{Device: 2, TimeUS: 5},
	}
	ann := []Annotation{
		{Device: 2, TimeUS: 1, Stage: "START"},
		{Device: 0, TimeUS: 15, Stage: "START"}, // before the first entry at 15 or later: 20
		{Device: 0, TimeUS: 20, Stage: "END"},   // the first later than 20: none
		{Device: 0, TimeUS: 20, Stage: "START"}, // at 20, but no earlier than the END before it
		{Device: 1, TimeUS: 0, Stage: "END"},    // no events: before device 2's
		{Device: 2, TimeUS: 5, Stage: "END"},
	}
	PlaceAnnotations(ann, ev)
	var got []int64
	for _, a := range ann {
		got = append(got, a.Event)
	}
	assert.Equal(t, []int64{4, 1, 4, 4, 4, 5}, got)
}

// ptAnnotated is a snapshot with one entry and the annotations items.
func ptAnnotated(items ...any) pdict {
	return pdict{{"device_traces", plist{plist{ptEntry("alloc", 1, 1)}}}, {"external_annotations", plist(items)}}
}

// Annotations PyTorch's own callbacks never write (no name, no stage,
// another stage) are skipped and counted in a note; malformed ones are
// errors naming the item, as for trace entries (TestReadPyTorchErrors).
func TestReadPyTorchAnnotationsSkipped(t *testing.T) {
	ann := ptAnnotated
	tr := mustReadPT(t, ann(
		ptAnnot("START", "kept", 0, 5),
		pdict{{"stage", "START"}, {"device", 0}, {"time_us", 1}},
		ptAnnot("END", "", 0, 2),
		pdict{{"name", "a"}, {"device", 0}, {"time_us", 3}},
		ptAnnot("MIDDLE", "b", 0, 4),
	), false)
	assert.Equal(t, []string{"4 of 5 external_annotations skipped (2 without a name, 1 without a stage, 1 with a stage other than START and END)"}, tr.Header.Notes)
	require.Len(t, tr.Events, 1)
	assert.Equal(t, []Annotation{{Device: 0, TimeUS: 5, Name: "kept", Stage: "START", Event: 1}}, tr.Annotations)
}

// ptExternal returns the written file's external_annotations as Go values.
func ptExternal(t *testing.T, data []byte) (ann []any, userDefined int) {
	t.Helper()
	pk, err := unpickle(data, "x")
	require.NoError(t, err)
	g, err := pk.toGo(pk.root, 10, 1<<30)
	require.NoError(t, err)
	root := g.(map[string]any)
	for _, l := range root["device_traces"].([]any) {
		for _, e := range l.([]any) {
			if e.(map[string]any)["action"] == "user_defined" {
				userDefined++
			}
		}
	}
	if a, ok := root["external_annotations"]; ok {
		ann = a.([]any)
	}
	return ann, userDefined
}

// The writer puts the annotations back in external_annotations, as
// PyTorch's dicts in time order, and reading the file gives the same
// trace; the spool writes the same bytes; so does a trip through the
// native format.
func TestWritePyTorchAnnotationsRoundTrip(t *testing.T) {
	tr := mustReadPT(t, annotatedPTSnapshot(), false)
	data, back := ptRoundTrip(t, tr)
	assert.Equal(t, tr.Annotations, back.Annotations)
	assert.Equal(t, ptNormEvents(tr), ptNormEvents(back))
	ann, ud := ptExternal(t, data)
	assert.Zero(t, ud)
	assert.Equal(t, []any{
		map[string]any{"stage": "START", "name": "y", "device": int64(3), "time_us": int64(5)},
		map[string]any{"stage": "END", "name": "x", "device": int64(1), "time_us": int64(10)},
		map[string]any{"stage": "START", "name": "fwd", "device": int64(0), "time_us": int64(90)},
		map[string]any{"stage": "END", "name": "inner", "device": int64(0), "time_us": int64(111)},
		map[string]any{"stage": "START", "name": "step", "device": int64(0), "time_us": int64(120)},
		map[string]any{"stage": "END", "name": "step", "device": int64(0), "time_us": int64(130)},
		map[string]any{"stage": "END", "name": "fwd", "device": int64(0), "time_us": int64(200)},
	}, ann)
	assert.Equal(t, data, ptSpoolWrite(t, tr))
	assert.Equal(t, data, ptWrite(t, nativeTrip(t, back)))
}

// nativeTrip writes tr in the native format and reads it back.
func nativeTrip(t *testing.T, tr *Trace) *Trace {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, WriteTrace(&buf, tr))
	r, err := NewNativeReader(&buf, "trip.mrt")
	require.NoError(t, err)
	defer r.Close()
	back, err := ReadAll(r)
	require.NoError(t, err)
	return back
}

func ptSpoolWrite(t *testing.T, tr *Trace) []byte {
	t.Helper()
	data, _ := spoolWrite(t, tr)
	return data
}

// Markers of an annotation's shape are events (≈2.4's user_defined
// entries, which have their index among the entries): they stay
// user_defined entries wherever they are, and read back the same; only
// Trace.Annotations go to external_annotations. Before, the writer moved
// those it could to external_annotations, where they read back as
// annotations beside the events.
func TestWritePyTorchMarkersStayEntries(t *testing.T) {
	st := NewStacks()
	mark := func(stage, name string, t int64) Event {
		return Event{Action: ActionMarker, Label: name, TimeUS: t, Stack: st.Intern([]Frame{annotationFrame(stage, name)})}
	}
	for _, tc := range []struct {
		name   string
		events []Event
	}{
		{"inside a free", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			{Action: ActionFreeRequested, Addr: 1, Size: 1, TimeUS: 110},
			mark("START", "m", 111),
			{Action: ActionFreeCompleted, Addr: 1, Size: 1, TimeUS: 112},
		}},
		{"out of time order", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			mark("END", "late", 50),
			{Action: ActionAlloc, Addr: 2, Size: 1, TimeUS: 120},
		}},
		{"where a reader would place it", []Event{
			mark("START", "a", 1),
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
		}},
		{"a trial's name", []Event{
			{Action: ActionTrialStart, Label: "trial 1", TimeUS: 5},
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &Trace{Header: Header{Devices: []Device{{Index: 0}}}, Stacks: st, Events: tc.events, HasFinal: true}
			data, back := ptRoundTrip(t, tr)
			ann, ud := ptExternal(t, data)
			assert.Empty(t, ann)
			assert.Empty(t, back.Annotations)
			assert.Equal(t, len(tc.events)-countAction(tc.events, ActionAlloc, ActionFreeRequested, ActionFreeCompleted), ud)
			assert.Equal(t, data, ptSpoolWrite(t, tr))
		})
	}
}

func countAction(evs []Event, as ...Action) int {
	n := 0
	for _, e := range evs {
		for _, a := range as {
			if e.Action == a {
				n++
			}
		}
	}
	return n
}

// Random annotated traces round-trip: pickle -> Trace -> pickle gives the
// same list (each annotation placed again by its time, PlaceAnnotations
// on the entries written), the same events (annotation-shaped markers
// among them stay where they are), the same bytes from the spool and the
// same bytes again from the trace read back; the native format keeps the
// list exactly, Event included, and pickle -> .mrt -> pickle gives the
// same bytes.
func TestWritePyTorchAnnotationsProperty(t *testing.T) {
	total := 0
	actions := []Action{ActionAlloc, ActionAlloc, ActionFreeRequested, ActionFreeCompleted, ActionSegmentAlloc, ActionSegmentFree, ActionOOM, ActionEmptyCache}
	names := []string{"fwd", "bwd", "step", "ProfilerStep#1"}
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		st := NewStacks()
		tr := &Trace{Stacks: st, HasFinal: true}
		ndev := 1 + r.IntN(3)
		for d := 0; d < ndev; d++ {
			tm := int64(r.IntN(50))
			for i, n := 0, r.IntN(40); i < n; i++ {
				tm += int64(r.IntN(4)) - int64(r.IntN(8)/7) // ties, and now and then a step back
				e := Event{Device: int32(d), TimeUS: tm}
				if r.IntN(6) == 0 {
					stage := []string{"START", "END"}[r.IntN(2)]
					name := names[r.IntN(len(names))]
					e.Action, e.Label = ActionMarker, name
					e.Stack = st.Intern([]Frame{annotationFrame(stage, name)})
				} else {
					e.Action = actions[r.IntN(len(actions))]
					e.Addr, e.Size = uint64(1+r.IntN(4))<<12, 512
				}
				tr.Events = append(tr.Events, e)
			}
		}
		for i, n := 0, r.IntN(12); i < n; i++ {
			tr.Annotations = append(tr.Annotations, Annotation{Device: int32(r.IntN(ndev + 1)), TimeUS: int64(r.IntN(200)) - 20,
				Name: names[r.IntN(len(names))], Stage: []string{"START", "END"}[r.IntN(2)]})
		}
		slices.SortStableFunc(tr.Annotations, func(a, b Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) })
		total += len(tr.Annotations)
		for d := range ndev + 1 {
			tr.Header.Devices = append(tr.Header.Devices, Device{Index: int32(d)})
		}
		written := ptWithout(tr, ActionEmptyCache)
		PlaceAnnotations(written.Annotations, written.Events)
		PlaceAnnotations(tr.Annotations, tr.Events) // any Event: the pickle keeps none

		data, back := ptRoundTrip(t, tr)
		if len(tr.Annotations) == 0 {
			require.Nil(t, back.Annotations, "seed %d", seed)
		} else {
			require.Equal(t, written.Annotations, back.Annotations, "seed %d", seed)
		}
		require.Equal(t, data, ptSpoolWrite(t, tr), "seed %d", seed)
		again, back2 := ptRoundTrip(t, back)
		require.Equal(t, data, again, "seed %d", seed)
		require.Equal(t, back.Annotations, back2.Annotations, "seed %d", seed)
		// The native format keeps the list as it is, Event included.
		require.Equal(t, tr.Annotations, nativeTrip(t, tr).Annotations, "seed %d", seed)
		require.Equal(t, data, ptWrite(t, nativeTrip(t, back)), "seed %d", seed)
	}
	assert.Greater(t, total, 1000)
}

func ptWithout(tr *Trace, a Action) *Trace {
	c := *tr
	c.Events = nil
	for _, e := range tr.Events {
		if e.Action != a {
			c.Events = append(c.Events, e)
		}
	}
	c.Annotations = slices.Clone(tr.Annotations)
	return &c
}

// The shared training snapshot: its optimizer step's START before the
// first entry at its time or later, its END after the last entry; the
// events are the snapshot's 19,136 entries; written and read back, the
// same trace.
func TestReadPyTorchAnnotationsShared(t *testing.T) {
	needSharedPyTorch(t)
	tr, err := ReadPyTorchFile(filepath.Join(sharedPyTorchDir, "cs336_wedsonlin_medium_128_training.pickle"))
	require.NoError(t, err)
	require.Len(t, tr.Events, 19136)
	for _, e := range tr.Events {
		require.NotEqual(t, ActionMarker, e.Action)
	}
	require.Len(t, tr.Annotations, 2)
	start, end := tr.Annotations[0], tr.Annotations[1]
	assert.Equal(t, Annotation{Device: 0, TimeUS: 1783874495959433, Name: "Optimizer.step#AdamW.step", Stage: "START", Event: start.Event}, start)
	assert.Equal(t, Annotation{Device: 0, TimeUS: 1783874496023051, Name: "Optimizer.step#AdamW.step", Stage: "END", Event: 19136}, end)
	for i := range start.Event {
		require.Less(t, tr.Events[i].TimeUS, start.TimeUS)
	}
	assert.GreaterOrEqual(t, tr.Events[start.Event].TimeUS, start.TimeUS)
	t.Logf("START before event %d", start.Event)

	data, back := ptRoundTrip(t, tr)
	assert.Equal(t, tr.Annotations, back.Annotations)
	ann, ud := ptExternal(t, data)
	assert.Len(t, ann, 2)
	assert.Zero(t, ud)
}

// A user_defined entry's first frame names its marker: PyTorch's
// record_function ranges put the range in filename and START or END in
// name; files memreplay wrote before had them the other way round; other
// writers put a plain label in name.
func TestUserDefinedLabel(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Filename: "ProfilerStep#0", Name: "START"}, "ProfilerStep#0"}, // PyTorch ≈2.4
		{Frame{Filename: "optimizer.step", Name: "END"}, "optimizer.step"},
		{Frame{Filename: "START", Name: "trial 7"}, "trial 7"}, // memreplay's older files
		{Frame{Filename: "memreplay", Name: "step 1"}, "step 1"},
		{Frame{Filename: "START", Name: "START"}, "START"}, // a label that is a stage word
		{Frame{Filename: "train.py", Line: 3, Name: "<module>"}, "<module>"},
		{Frame{Filename: "", Name: "START"}, "START"},
		{Frame{Filename: "START", Name: ""}, ""},
		{Frame{}, ""},
	} {
		assert.Equal(t, c.want, UserDefinedLabel(c.f), "%+v", c.f)
	}
}

// A memreplay recording from before the frames followed PyTorch's order
// ({filename: START, name: the trial}) still reads its label.
func TestReadPyTorchOlderTrialMarkers(t *testing.T) {
	old := plist{pdict{{"filename", "START"}, {"line", 0}, {"name", "trial 7"}}}
	snap := pdict{{"device_traces", plist{plist{ptEntry("user_defined", 0, 0, pkv{"frames", old})}}}}
	tr := mustReadPT(t, snap, false)
	require.Len(t, tr.Events, 1)
	assert.Equal(t, "trial 7", tr.Events[0].Label)
}

// The import of a snapshot with many external_annotations allocates for
// each about what the pickle's dict and the Annotation take (≈200
// bytes), not five times the Annotation (the list grown by append: ≈460
// bytes each).
func TestImportAnnotationsMemory(t *testing.T) {
	const n = 1 << 18
	tr := &Trace{Header: Header{Source: "pytorch"}, Stacks: NewStacks(), Events: []Event{
		{Action: ActionAlloc, Addr: 1 << 20, Size: 512, TimeUS: n / 2},
	}}
	names := []string{"forward", "backward", "Optimizer.step#AdamW.step"}
	for i := range n {
		tr.Annotations = append(tr.Annotations, Annotation{Device: int32(i % 2), TimeUS: int64(i), Name: names[i%3], Stage: []string{"START", "END"}[i/2%2]})
	}
	var buf bytes.Buffer
	require.NoError(t, WritePyTorch(&buf, tr))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	back, err := ReadPyTorch(bytes.NewReader(buf.Bytes()), "ann.pickle")
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Len(t, back.Annotations, n)
	perAnn := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("%.0f bytes allocated per annotation", perAnn)
	assert.Less(t, perAnn, 320.0)
}

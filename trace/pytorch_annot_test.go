package trace

import (
	"math/rand/v2"
	"os"
	"path/filepath"
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

type annStep struct {
	action Action
	label  string // markers: the name; the stage is label's frame's filename
	stage  string
	time   int64
	dev    int32
}

func annSteps(tr *Trace) []annStep {
	var out []annStep
	for _, e := range tr.Events {
		s := annStep{action: e.Action, label: e.Label, time: e.TimeUS, dev: e.Device}
		if e.Action == ActionMarker {
			f := tr.Stacks.Frames(e.Stack)
			if len(f) == 1 && f[0].Filename == e.Label && f[0].Line == 0 {
				s.stage = f[0].Name
			}
		}
		out = append(out, s)
	}
	return out
}

// Each annotation is a marker on its device, in time order: a START
// before the entries at its time, an END after them, moved back to just
// after the alloc before it (never between a free's two entries), those
// after the last entry at the end; a device named only by annotations is
// one of the trace's. Without the change they were dropped with a note.
func TestReadPyTorchAnnotations(t *testing.T) {
	const A, M = ActionAlloc, ActionMarker
	want := []annStep{
		{M, "fwd", "START", 90, 0},
		{A, "", "", 100, 0},
		// inner's END (111) falls between the free's two entries and
		// step's START (120) before the alloc at 120: both go back to
		// after the alloc at 100.
		{M, "inner", "END", 111, 0},
		{M, "step", "START", 120, 0},
		{ActionFreeRequested, "", "", 110, 0},
		{ActionFreeCompleted, "", "", 112, 0},
		{A, "", "", 120, 0},
		{A, "", "", 130, 0},
		{M, "step", "END", 130, 0}, // after the alloc of its own time
		{ActionFreeRequested, "", "", 140, 0},
		{M, "fwd", "END", 200, 0}, // after the last entry
		{M, "x", "END", 10, 1},
		{A, "", "", 50, 1},
		{M, "y", "START", 5, 3},
	}
	for _, cpp := range []bool{false, true} {
		data := encodePickle(annotatedPTSnapshot(), cpp)
		tr, err := readPT(t, data)
		require.NoError(t, err)
		checkPTTrace(t, tr)
		assert.Equal(t, want, annSteps(tr))
		assert.Empty(t, tr.Header.Notes)
		assert.Equal(t, []Device{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}, tr.Header.Devices)
		// Markers allocate nothing.
		for _, e := range tr.Events {
			if e.Action == ActionMarker {
				assert.Zero(t, e.Addr)
				assert.Zero(t, e.Size)
			}
		}
		// The whole import gives the same trace as the streamed one.
		whole, err := wholeImport(data, "test.pickle")
		require.NoError(t, err)
		assert.Equal(t, tr, whole)

		// From a file, packed, with an observer: it is told to restart
		// and then sees the merged events.
		path := filepath.Join(t.TempDir(), "a.pickle")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		obs := &recordingObserver{}
		p, err := ReadPyTorchObserved(path, obs)
		require.NoError(t, err)
		got := p.Trace()
		assert.Equal(t, want, annSteps(got))
		assert.Positive(t, obs.restarts)
		require.Len(t, obs.events, len(want))
		assert.Equal(t, got.Events, obs.events)
	}
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
	assert.Equal(t, []annStep{{ActionAlloc, "", "", 0, 0}, {ActionMarker, "kept", "START", 5, 0}}, annSteps(tr))
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
// trace; the spool writes the same bytes.
func TestWritePyTorchAnnotationsRoundTrip(t *testing.T) {
	tr := mustReadPT(t, annotatedPTSnapshot(), false)
	data, back := ptRoundTrip(t, tr)
	assert.Equal(t, annSteps(tr), annSteps(back))
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
}

func ptSpoolWrite(t *testing.T, tr *Trace) []byte {
	t.Helper()
	data, _ := spoolWrite(t, tr)
	return data
}

// Markers of an annotation's shape that ReadPyTorch would not put back
// where they are stay user_defined entries: the trace reads back the same.
func TestWritePyTorchAnnotationsKeptInPlace(t *testing.T) {
	st := NewStacks()
	mark := func(stage, name string, t int64) Event {
		return Event{Action: ActionMarker, Label: name, TimeUS: t, Stack: st.Intern([]Frame{annotationFrame(stage, name)})}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		moved  int
	}{
		{"inside a free", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			{Action: ActionFreeRequested, Addr: 1, Size: 1, TimeUS: 110},
			mark("START", "m", 111),
			{Action: ActionFreeCompleted, Addr: 1, Size: 1, TimeUS: 112},
		}, 0},
		{"out of time order", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			mark("END", "late", 50),
			{Action: ActionAlloc, Addr: 2, Size: 1, TimeUS: 120},
		}, 0},
		{"after an entry it precedes", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			mark("START", "s", 100), // a START goes before the entries at its time
		}, 0},
		{"one gap moves, the next stays", []Event{
			mark("START", "a", 1),
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			mark("END", "b", 90),
		}, 1},
		{"read back further on", []Event{
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
			mark("START", "s", 300),
			{Action: ActionFreeRequested, Addr: 1, Size: 1, TimeUS: 110},
			{Action: ActionAlloc, Addr: 2, Size: 1, TimeUS: 120},
		}, 0},
		{"a trial's name", []Event{
			{Action: ActionTrialStart, Label: "trial 1", TimeUS: 5},
			{Action: ActionAlloc, Addr: 1, Size: 1, TimeUS: 100},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &Trace{Header: Header{Devices: []Device{{Index: 0}}}, Stacks: st, Events: tc.events, HasFinal: true}
			data, back := ptRoundTrip(t, tr)
			ann, ud := ptExternal(t, data)
			assert.Len(t, ann, tc.moved)
			assert.Equal(t, len(tc.events)-tc.moved-countAction(tc.events, ActionAlloc, ActionFreeRequested, ActionFreeCompleted), ud)
			if tc.events[0].Action != ActionTrialStart {
				assert.Equal(t, annSteps(tr), annSteps(back))
			}
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

// Random traces with annotation-shaped markers anywhere, at any time: the
// file reads back to the same events (moved or not), and the spool writes
// the same bytes. Both ways are taken.
func TestWritePyTorchAnnotationsProperty(t *testing.T) {
	moved, kept := 0, 0
	actions := []Action{ActionAlloc, ActionAlloc, ActionFreeRequested, ActionFreeCompleted, ActionSegmentAlloc, ActionSegmentFree, ActionOOM, ActionEmptyCache}
	for seed := uint64(0); seed < 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		st := NewStacks()
		tr := &Trace{Stacks: st, HasFinal: true}
		ndev := 1 + r.IntN(3)
		for d := 0; d < ndev; d++ {
			tm := int64(r.IntN(50))
			for i, n := 0, r.IntN(40); i < n; i++ {
				tm += int64(r.IntN(4)) - int64(r.IntN(8)/7) // ties, and now and then a step back
				e := Event{Device: int32(d), TimeUS: tm}
				if r.IntN(3) == 0 {
					stage := "START"
					if r.IntN(2) == 0 {
						stage = "END"
					}
					name := []string{"fwd", "bwd", "step"}[r.IntN(3)]
					e.Action, e.Label = ActionMarker, name
					e.TimeUS += int64(r.IntN(5)) - 2
					e.Stack = st.Intern([]Frame{annotationFrame(stage, name)})
				} else {
					e.Action = actions[r.IntN(len(actions))]
					e.Addr, e.Size = uint64(1+r.IntN(4))<<12, 512
				}
				tr.Events = append(tr.Events, e)
			}
		}
		data, back := ptRoundTrip(t, tr)
		require.Equal(t, annSteps(ptWithout(tr, ActionEmptyCache)), annSteps(back), "seed %d", seed)
		ann, ud := ptExternal(t, data)
		moved += len(ann)
		kept += ud
		require.Equal(t, data, ptSpoolWrite(t, tr), "seed %d", seed)
	}
	t.Logf("%d annotations moved, %d kept as user_defined", moved, kept)
	assert.Positive(t, moved)
	assert.Positive(t, kept)
}

func ptWithout(tr *Trace, a Action) *Trace {
	c := *tr
	c.Events = nil
	for _, e := range tr.Events {
		if e.Action != a {
			c.Events = append(c.Events, e)
		}
	}
	return &c
}

// The shared training snapshot: its optimizer step's START among the
// entries (after the last alloc before 495959433 µs), its END after the
// last entry; written and read back, the same trace.
func TestReadPyTorchAnnotationsShared(t *testing.T) {
	needSharedPyTorch(t)
	tr, err := ReadPyTorchFile(filepath.Join(sharedPyTorchDir, "cs336_wedsonlin_medium_128_training.pickle"))
	require.NoError(t, err)
	var at []int
	for i, e := range tr.Events {
		if e.Action == ActionMarker {
			at = append(at, i)
		}
	}
	require.Equal(t, []int{9924, 19137}, at)
	steps := annSteps(tr)
	assert.Equal(t, annStep{ActionMarker, "Optimizer.step#AdamW.step", "START", 1783874495959433, 0}, steps[9924])
	assert.Equal(t, annStep{ActionMarker, "Optimizer.step#AdamW.step", "END", 1783874496023051, 0}, steps[19137])
	// Right after an alloc; the entries after it up to the next alloc
	// are earlier than it (frees) or not (that alloc).
	assert.Equal(t, ActionAlloc, tr.Events[9923].Action)
	for i := 9925; tr.Events[i].Action != ActionAlloc; i++ {
		assert.Less(t, tr.Events[i].TimeUS, tr.Events[9924].TimeUS)
	}
	next := 9925
	for tr.Events[next].Action != ActionAlloc {
		next++
	}
	assert.GreaterOrEqual(t, tr.Events[next].TimeUS, tr.Events[9924].TimeUS)

	data, back := ptRoundTrip(t, tr)
	assert.Equal(t, annSteps(tr), annSteps(back))
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

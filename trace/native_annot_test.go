package trace

import (
	"bytes"
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Annotations in the native format: kept exactly (Event included) in
// records of their own, split when long; one that names an event past the
// trace's end, or a malformed record, is a FormatError naming the file;
// the writer refuses what the reader would.
func TestNativeAnnotations(t *testing.T) {
	tr := &Trace{Stacks: NewStacks(), Events: []Event{{Action: ActionAlloc, Addr: 1 << 20, Size: 512, TimeUS: 7}}}
	for i := range 2*annotationsPerRecord + 3 {
		tr.Annotations = append(tr.Annotations, Annotation{Device: int32(i % 3), TimeUS: int64(i) - 5, Name: "n", Stage: []string{"START", "END"}[i%2], Event: int64(i % 2)})
	}
	back := nativeTrip(t, tr)
	assert.Equal(t, tr.Annotations, back.Annotations)
	assert.Equal(t, tr.Events, back.Events)

	write := func(ann []Annotation, raw []byte) []byte {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, Header{})
		require.NoError(t, err)
		require.NoError(t, w.WriteEvent(&tr.Events[0], tr.Stacks))
		require.NoError(t, w.WriteAnnotations(ann))
		if raw != nil {
			w.appendRecord(tagAnnotations, raw)
		}
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	read := func(data []byte) error {
		r, err := NewNativeReader(bytes.NewReader(data), "a.mrt")
		require.NoError(t, err)
		defer r.Close()
		_, err = ReadAll(r)
		return err
	}
	require.NoError(t, read(write([]Annotation{{Name: "x", Stage: "END", Event: 1}}, nil)))
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"past the end", write(nil, []byte{1, 2, 0, 0, 1, 1, 'x'}), "annotation 0 comes before event 2, but the trace has 1 events"},
		{"bad stage", write(nil, []byte{1, 0, 0, 0, 2, 1, 'x'}), "stage 2"},
		{"no name", write(nil, []byte{1, 0, 0, 0, 0, 0}), `name ""`},
		{"short", write(nil, []byte{1, 0, 0, 0, 0, 5, 'x'}), "malformed annotations record"},
		{"count past the bytes", write(nil, []byte{2, 0, 0, 0, 0, 1, 'x', 0, 0}), "annotations record counts 2 in 9 bytes"},
		{"count", write(nil, []byte{100, 0}), "annotations record counts 100"},
	} {
		err := read(tc.data)
		var fe *FormatError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.name, err)
		assert.Equal(t, "a.mrt", fe.File, tc.name)
		assert.Contains(t, err.Error(), tc.msg, tc.name)
	}

	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{})
	require.NoError(t, err)
	assert.Error(t, w.WriteAnnotations([]Annotation{{Name: "x", Stage: "MIDDLE"}}))
}

// The writer refuses what its reader would: a list with a bad annotation
// past the first record writes none of it (the file stays valid, without
// them), and an annotation past the trace's last event fails Close
// rather than give a file that does not read.
func TestNativeWriterRefusesAnnotations(t *testing.T) {
	ev := Event{Action: ActionAlloc, Addr: 1 << 20, Size: 512, TimeUS: 7}
	ann := make([]Annotation, annotationsPerRecord+1)
	for i := range ann {
		ann[i] = Annotation{Name: "n", Stage: "START", Event: 1}
	}
	ann[annotationsPerRecord].Stage = "MIDDLE"
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{})
	require.NoError(t, err)
	require.NoError(t, w.WriteEvent(&ev, NewStacks()))
	require.Error(t, w.WriteAnnotations(ann))
	require.NoError(t, w.Close())
	back, err := readNative(t, buf.Bytes())
	require.NoError(t, err)
	assert.Empty(t, back.Annotations)

	buf.Reset()
	w, err = NewWriter(&buf, Header{})
	require.NoError(t, err)
	require.NoError(t, w.WriteEvent(&ev, NewStacks()))
	require.NoError(t, w.WriteAnnotations([]Annotation{{Name: "n", Stage: "END", Event: 2}}))
	err = w.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "before event 2, but the trace has 1 events")
}

// The reader interns annotation names: a million annotations of a few
// ranges hold a few strings, not a copy each.
func TestNativeAnnotationNamesInterned(t *testing.T) {
	tr := &Trace{Stacks: NewStacks()}
	for i := range 3 * annotationsPerRecord {
		tr.Annotations = append(tr.Annotations, Annotation{Name: []string{"fwd", "bwd"}[i%2], Stage: "START"})
	}
	back := nativeTrip(t, tr)
	require.Equal(t, tr.Annotations, back.Annotations)
	for i, a := range back.Annotations {
		assert.Same(t, unsafe.StringData(back.Annotations[i%2].Name), unsafe.StringData(a.Name), "annotation %d", i)
	}
}

// The packed log's placement (skimEvent: devices and times only) agrees
// with PlaceAnnotations over the same events, whatever fields they carry.
func TestPlaceAnnotationsPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		var evs []Event
		l := &EventLog{}
		tm := int64(r.IntN(100))
		for d := range int32(1 + r.IntN(3)) {
			for range r.IntN(60) {
				tm += int64(r.IntN(5)) - 1
				e := Event{Action: Action(1 + r.IntN(13)), Device: d, Addr: uint64(r.IntN(1 << 20)), Size: uint64(r.IntN(1 << 30)),
					Stream: uint64(r.IntN(2)), TimeUS: tm, DeviceFree: uint64(r.IntN(2) << 40), Stack: StackID(r.IntN(3)), Label: []string{"", "a", "step 1"}[r.IntN(3)]}
				evs = append(evs, e)
				l.Append(&e)
			}
		}
		var ann []Annotation
		for range r.IntN(10) {
			ann = append(ann, Annotation{Device: int32(r.IntN(4)), TimeUS: int64(r.IntN(400)) - 50, Name: "x", Stage: []string{"START", "END"}[r.IntN(2)]})
		}
		slices.SortStableFunc(ann, func(a, b Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) })
		want := slices.Clone(ann)
		PlaceAnnotations(want, evs)
		l.placeAnnotations(ann)
		require.Equal(t, want, ann)
	}
}

// A list known before the events (WriteTrace, convert) is written before
// them, whole: the reader has it as soon as it is opened, before any
// event is read (AnnotationsComplete), which a replay stopped early and a
// recording of the replay rely on. One written after the events is had
// only at the end. The writer refuses to add after the events to a list
// it wrote before them, and the reader refuses such a file.
func TestNativeAnnotationsAhead(t *testing.T) {
	tr := &Trace{Stacks: NewStacks(), Events: []Event{
		{Action: ActionAlloc, Addr: 1 << 20, Size: 512, TimeUS: 7},
		{Action: ActionFreeRequested, Addr: 1 << 20, Size: 512, TimeUS: 9},
	}, Annotations: []Annotation{{Name: "fwd", Stage: "START", Event: 0, TimeUS: 6}, {Name: "fwd", Stage: "END", Event: 2, TimeUS: 10}}}
	var buf bytes.Buffer
	require.NoError(t, WriteTrace(&buf, tr))
	r, err := NewNativeReader(bytes.NewReader(buf.Bytes()), "a.mrt")
	require.NoError(t, err)
	assert.True(t, AnnotationsComplete(r))
	assert.Equal(t, tr.Annotations, AnnotationsOf(r), "before the first event")
	back, err := ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, tr.Events, back.Events)
	assert.Equal(t, tr.Annotations, back.Annotations)
	require.NoError(t, r.Close())

	// After the events: had at the end only.
	buf.Reset()
	w, err := NewWriter(&buf, Header{})
	require.NoError(t, err)
	for i := range tr.Events {
		require.NoError(t, w.WriteEvent(&tr.Events[i], tr.Stacks))
	}
	require.NoError(t, w.WriteAnnotations(tr.Annotations))
	require.NoError(t, w.Close())
	r, err = NewNativeReader(bytes.NewReader(buf.Bytes()), "a.mrt")
	require.NoError(t, err)
	assert.False(t, AnnotationsComplete(r))
	assert.Empty(t, AnnotationsOf(r))
	back, err = ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, tr.Annotations, back.Annotations)
	assert.True(t, AnnotationsComplete(r))
	require.NoError(t, r.Close())

	// Before and after: the writer refuses, and a file that has both
	// (written past the writer's check) does not read.
	buf.Reset()
	w, err = NewWriter(&buf, Header{})
	require.NoError(t, err)
	require.NoError(t, w.WriteAnnotations(tr.Annotations[:1]))
	for i := range tr.Events {
		require.NoError(t, w.WriteEvent(&tr.Events[i], tr.Stacks))
	}
	require.Error(t, w.WriteAnnotations(tr.Annotations[1:]))
	w.annAhead = false
	require.NoError(t, w.WriteAnnotations(tr.Annotations[1:]))
	require.NoError(t, w.Close())
	_, err = readNative(t, buf.Bytes())
	var fe *FormatError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Contains(t, err.Error(), "annotations after the events, the list having come before them")
}

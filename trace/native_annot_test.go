package trace

import (
	"bytes"
	"errors"
	"testing"

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
		{"past the end", write([]Annotation{{Name: "x", Stage: "END", Event: 2}}, nil), "annotation 0 comes before event 2, but the trace has 1 events"},
		{"bad stage", write(nil, []byte{1, 0, 0, 0, 2, 1, 'x'}), "stage 2"},
		{"no name", write(nil, []byte{1, 0, 0, 0, 0, 0}), `name ""`},
		{"short", write(nil, []byte{2, 0, 0, 0, 0, 1, 'x'}), "malformed annotations record"},
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

package trace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// wholeImport is the import without streaming: the whole object graph,
// then the conversion, as before stream.go. Streaming must give exactly
// its result.
func wholeImport(data []byte, name string) (*Trace, error) {
	t := newPTTrace(name)
	err := importPyTorch(newMemUnpickler(data, name), t, &sliceSink{t})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// streamedImport streams, without the fallback; streamed is false when
// the snapshot is not laid out for streaming.
func streamedImport(data []byte, name string) (t *Trace, streamed bool, err error) {
	t = newPTTrace(name)
	u := withStream(newMemUnpickler(data, name))
	err = importPyTorch(u, t, &sliceSink{t})
	if errors.Is(err, errNotStreamed) {
		return nil, false, err
	}
	return t, u.st.dt != 0, err
}

func realSnapshots(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join(sharedPyTorchDir, "*.pickle"))
	local, _ := filepath.Glob(filepath.Join("..", "traces", "pytorch", "*.pickle"))
	files = append(files, local...)
	files = append(files, testdataSnapshot)
	return files
}

// TestStreamedImportMatchesWhole: every real snapshot streams (no
// fallback) and gives the trace the whole import gives, stack numbering
// included; the packed events read back the same.
func TestStreamedImportMatchesWhole(t *testing.T) {
	files := realSnapshots(t)
	snaps := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		whole, err := wholeImport(data, f)
		require.NoError(t, err, f)
		got, streamed, err := streamedImport(data, f)
		require.NoError(t, err, f)
		if len(whole.Events) > 0 {
			require.True(t, streamed, "%s: entries not streamed", f)
			snaps++
		}
		require.Equal(t, whole, got, f)

		p, err := ReadPyTorchPacked(f)
		require.NoError(t, err, f)
		require.Equal(t, whole, p.Trace(), f)
	}
	require.Greater(t, snaps, 2)
}

// TestStreamedImportWritten: memreplay's own writer's snapshots stream,
// multi-device ones too, and read back what was written.
func TestStreamedImportWritten(t *testing.T) {
	for _, bigList := range []bool{false, true} {
		tr := smallPTSnapshot()
		data := encodePickle(tr, bigList)
		whole, err := wholeImport(data, "x")
		require.NoError(t, err)
		got, streamed, err := streamedImport(data, "x")
		require.NoError(t, err)
		require.True(t, streamed)
		require.Equal(t, whole, got)
	}
	var buf bytes.Buffer
	tr := &Trace{Header: Header{Version: FormatVersion}, Stacks: NewStacks()}
	st := tr.Stacks.Intern([]Frame{{Filename: "a.py", Line: 1, Name: "f"}})
	for i := range 3000 {
		tr.Events = append(tr.Events, Event{Action: ActionAlloc, Device: int32(i % 3), Addr: uint64(i) << 9, Size: 512, Stack: st, TimeUS: int64(i)})
	}
	require.NoError(t, WritePyTorch(&buf, tr))
	whole, err := wholeImport(buf.Bytes(), "x")
	require.NoError(t, err)
	got, streamed, err := streamedImport(buf.Bytes(), "x")
	require.NoError(t, err)
	require.True(t, streamed)
	require.Equal(t, whole, got)
	require.Len(t, got.Events, 3000)
}

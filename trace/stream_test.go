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
	sink := &sliceSink{t: newPTTrace(name)}
	err := importPyTorch(newMemUnpickler(data, name), sink.t, sink)
	if err != nil {
		return nil, err
	}
	sink.flatten()
	return sink.t, nil
}

// streamedImport streams, without the fallback; streamed is false when
// the snapshot is not laid out for streaming.
func streamedImport(data []byte, name string) (t *Trace, streamed bool, err error) {
	sink := &sliceSink{t: newPTTrace(name)}
	u := withStream(newMemUnpickler(data, name))
	err = importPyTorch(u, sink.t, sink)
	if errors.Is(err, errNotStreamed) {
		return nil, false, err
	}
	sink.flatten()
	return sink.t, u.st.dt != 0, err
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

// sharedEntrySnapshot has one entry dict twice in device 0's list (pickle
// allows it; PyTorch never writes it): not streamable, it is imported
// again whole.
func sharedEntrySnapshot() any {
	e := &pshared{pdict{{"action", "alloc"}, {"addr", int64(0x7f0000000000)}, {"size", 512}, {"stream", 0}}}
	other := pdict{{"action", "free_requested"}, {"addr", int64(0x7f0000000000)}, {"size", 512}, {"stream", 0}}
	return pdict{
		{"segments", plist{}},
		{"device_traces", plist{plist{e, other, e}, plist{other}}},
	}
}

// TestStreamFallsBackToWhole: a snapshot whose layout streaming cannot
// take (an entry referred to again after it was converted) is imported
// whole, with the whole import's result, from memory and from a file.
func TestStreamFallsBackToWhole(t *testing.T) {
	for _, cpp := range []bool{false, true} {
		data := encodePickle(sharedEntrySnapshot(), cpp)
		_, _, err := streamedImport(data, "x")
		require.ErrorIs(t, err, errNotStreamed)
		whole, err := wholeImport(data, "x")
		require.NoError(t, err)
		require.Len(t, whole.Events, 4)
		require.Equal(t, whole.Events[0], whole.Events[2])

		got, err := ReadPyTorch(bytes.NewReader(data), "x")
		require.NoError(t, err)
		require.Equal(t, whole, got)

		path := filepath.Join(t.TempDir(), "x")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		whole.Header.SourceFile = path
		fromFile, err := ReadPyTorchFile(path)
		require.NoError(t, err)
		require.Equal(t, whole, fromFile)

		obs := &recordingObserver{}
		p, err := ReadPyTorchObserved(path, obs)
		require.NoError(t, err)
		require.Equal(t, whole, p.Trace())
		require.Equal(t, whole.Events, obs.events, "the observer sees the events of the import that counted")
		require.Equal(t, 1, obs.restarts)
	}
}

type recordingObserver struct {
	events   []Event
	restarts int
}

func (o *recordingObserver) Event(i int64, e *Event) {
	if int64(len(o.events)) != i {
		panic("events out of order")
	}
	o.events = append(o.events, *e)
}
func (o *recordingObserver) Restart() { o.events, o.restarts = nil, o.restarts+1 }

// TestObservedImport: the observer sees every event of a real snapshot,
// in order, spread over several chunks of the log.
func TestObservedImport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.pickle")
	require.NoError(t, os.WriteFile(path, genPTSnapshot(400_000), 0o644))
	obs := &recordingObserver{}
	p, err := ReadPyTorchObserved(path, obs)
	require.NoError(t, err)
	require.Greater(t, len(p.Events.chunks), 2)
	require.Equal(t, p.Trace().Events, obs.events)
	require.Zero(t, obs.restarts)
	require.Len(t, obs.events, 400_000)
}

// TestEventLogRoundTrip: packed events read back exactly, across chunks,
// whatever their fields.
func TestEventLogRoundTrip(t *testing.T) {
	var l EventLog
	var want []Event
	for i := range 300000 {
		e := Event{Action: Action(1 + i%int(numActions-1)), Device: int32(i % 3), Addr: uint64(i*7919) << 9,
			Size: uint64(i * 13), Stream: uint64(i % 5), TimeUS: int64(i) * 3, Stack: StackID(i % 17)}
		switch i % 97 {
		case 0:
			e.Addr, e.Size, e.Stream, e.TimeUS = ^uint64(0), ^uint64(0), ^uint64(0), -1<<63
		case 1:
			e.DeviceFree, e.Label = 123456789, "trial "+string(rune('a'+i%7))
		case 2:
			e.Device = 1<<31 - 1
		}
		want = append(want, e)
		l.Append(&e)
	}
	require.Greater(t, len(l.chunks), 1)
	for pass := 0; pass < 2; pass++ {
		cur := l.Cursor()
		var got []Event
		var e Event
		for cur.Next(&e) == nil {
			got = append(got, e)
		}
		require.Equal(t, want, got)
	}
}

// TestFileWindowMatchesMemory: a file read through a small window (a
// refill every few opcodes, strings longer than the window) imports as
// the same bytes in memory do, and a file cut anywhere fails with the
// same error at the same byte offset.
func TestFileWindowMatchesMemory(t *testing.T) {
	defer func(w int) { pickleWindow = w }(pickleWindow)
	pickleWindow = 24
	tr := smallPTSnapshot()
	long := pdict{{"action", "snapshot"}, {"note", string(bytes.Repeat([]byte("x"), 300))}}
	tr.(pdict)[1].v.(plist)[0] = append(tr.(pdict)[1].v.(plist)[0].(plist), long)
	dir := t.TempDir()
	for _, cpp := range []bool{false, true} {
		data := encodePickle(tr, cpp)
		for n := 0; n <= len(data); n++ {
			path := filepath.Join(dir, "cut.pickle")
			require.NoError(t, os.WriteFile(path, data[:n], 0o644))
			want, werr := ReadPyTorch(bytes.NewReader(data[:n]), path)
			got, err := ReadPyTorchFile(path)
			if werr != nil {
				require.Error(t, err, "cut at %d", n)
				require.Equal(t, werr.Error(), err.Error(), "cut at %d", n)
				continue
			}
			require.NoError(t, err, "cut at %d", n)
			require.Equal(t, want, got, "cut at %d", n)
			require.Len(t, got.Events, 3)
		}
	}
}

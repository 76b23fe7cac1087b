package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateNative = flag.Bool("update-native", false, "rewrite testdata/native_v1_sample.mrt and native_v2_sample.mrt")

// nativeSampleTrace exercises every field the format stores: all actions,
// several devices (one negative), addresses near 2^64, streams above 2^63,
// negative time deltas, labels inline and outside trial/marker events,
// DeviceFree on oom and elsewhere, shared stacks, and initial and final
// segments with every block state.
func nativeSampleTrace() *Trace {
	st := NewStacks()
	s1 := st.Intern([]Frame{{"train.py", 10, "main"}, {"model.py", 42, "forward"}})
	s2 := st.Intern([]Frame{{"train.py", 10, "main"}, {"model.py", -7, "backward"}, {"ünïcode.py", math.MaxInt64, "λ"}})
	s3 := st.Intern([]Frame{{"", 0, ""}})
	const hi = math.MaxUint64 - 0xfff
	bigStream := uint64(1)<<63 + 12345
	t := &Trace{
		Header: Header{
			Version:    FormatVersion,
			Source:     "memreplay-test",
			SourceFile: "/tmp/x.pickle",
			Devices: []Device{
				{Index: 0, Name: "NVIDIA GeForce RTX 4090", Capacity: 24 << 30},
				{Index: 1, Capacity: math.MaxUint64},
			},
			AllocatorSettings: map[string]any{
				"PYTORCH_CUDA_ALLOC_CONF":      "expandable_segments:True",
				"max_split_size":               int64(-1),
				"big":                          int64(math.MaxInt64),
				"garbage_collection_threshold": 0.8,
				"inf":                          math.Inf(1),
				"expandable_segments":          true,
				"roundup_power2_divisions":     map[string]any{"1": int64(1), "32768": int64(0), "nested": map[string]any{}},
				"list":                         []any{int64(1), "two", false, nil},
			},
			Tools: map[string]string{"memreplay": "dev", "torch": "2.9.0"},
			Notes: []string{"a note", ""},
		},
		Stacks: st,
		Initial: []Segment{
			{Device: 0, Address: 0x7f0000000000, TotalSize: 2 << 20, Stream: 0, Pool: "large", Stack: s1,
				Blocks: []Block{
					{Address: 0x7f0000000000, Size: 1 << 20, RequestedSize: 1000000, State: BlockAllocated, Stack: s1},
					{Address: 0x7f0000100000, Size: 512 << 10, RequestedSize: 3, State: BlockPendingFree, Stack: s2},
					{Address: 0x7f0000180000, Size: 512 << 10, RequestedSize: 0, State: BlockInactive},
				}},
			{Device: 1, Address: hi, TotalSize: 0xfff, Stream: bigStream, Pool: "small", PoolID: [2]int64{-3, math.MaxInt64},
				Expandable: true, Blocks: []Block{{Address: hi + 16, Size: 16, State: BlockInactive}}}, // a gap
			{Device: 3, Address: 0, Pool: ""},
		},
		InitialReconstructed: true,
		Events: []Event{
			{Action: ActionTrialStart, Label: "trial 268", TimeUS: 1_700_000_000_000_000},
			{Action: ActionSegmentAlloc, Addr: 0x7f0000200000, Size: 20 << 20, TimeUS: 1_700_000_000_000_010, Stack: s1},
			{Action: ActionAlloc, Addr: 0x7f0000200000, Size: 1234, TimeUS: 1_700_000_000_000_011, Stack: s1},
			{Action: ActionAlloc, Device: 1, Addr: hi, Size: 4096, Stream: bigStream, TimeUS: 1_700_000_000_000_005, Stack: s2}, // time goes back
			{Action: ActionAlloc, Device: 1, Addr: 512, Size: 1, Stream: math.MaxUint64, TimeUS: 0},
			{Action: ActionFreeRequested, Device: 0, Addr: 0x7f0000200000, Size: 1234, TimeUS: math.MaxInt64},
			{Action: ActionFreeCompleted, Device: 0, Addr: 0x7f0000200000, Size: 1234, TimeUS: math.MinInt64, Stack: s3},
			{Action: ActionSegmentMap, Device: -1, Addr: math.MaxUint64, Size: 2 << 20, Stream: 7},
			{Action: ActionSegmentUnmap, Device: -1, Addr: 0, Size: 2 << 20, Stream: bigStream},
			{Action: ActionSegmentFree, Device: 2, Addr: 0x7f0000200000, Size: 20 << 20, Stream: 7},
			{Action: ActionOOM, Device: 2, Size: 1 << 40, DeviceFree: 123456789, Stack: s2},
			{Action: ActionOOM, Device: 2, Size: 1, DeviceFree: 0},
			{Action: ActionEmptyCache, Device: 0, Addr: 99},
			{Action: ActionStreamSync, Stream: 7, DeviceFree: 5},                  // DeviceFree outside oom
			{Action: ActionAlloc, Addr: 64, Size: 64, Label: "label on an alloc"}, // Label outside trials
			{Action: ActionMarker, Label: "snapshot", Size: 1 << 30},
			{Action: ActionMarker, Label: ""},
			{Action: ActionMarker, Label: strings.Repeat("long label ", 30000), DeviceFree: 1},
			{Action: ActionTrialEnd, Label: "trial 268", Stream: 0},
		},
		Final: []Segment{
			{Device: 0, Address: 0x7f0000000000, TotalSize: 2 << 20, Pool: "large",
				Blocks: []Block{{Address: 0x7f0000000000, Size: 2 << 20, RequestedSize: 77, State: BlockInactive, Stack: s2}}},
		},
		HasFinal: true,
	}
	return t
}

// nativeResolved is a trace with stack IDs replaced by frames, so traces whose
// tables number stacks differently compare equal.
type nativeResolved struct {
	Header  Header
	Initial []nativeResolvedSeg
	Rec     bool
	Events  []nativeResolvedEvent
	Final   []nativeResolvedSeg
	HasFin  bool
	Ann     []Annotation
}

type nativeResolvedEvent struct {
	Event
	Frames []Frame
}

type nativeResolvedSeg struct {
	Segment
	Frames      []Frame
	BlockFrames [][]Frame
}

func nativeResolve(t *Trace) nativeResolved {
	segs := func(in []Segment) []nativeResolvedSeg {
		if in == nil {
			return nil
		}
		out := make([]nativeResolvedSeg, len(in))
		for i, s := range in {
			rs := nativeResolvedSeg{Segment: s, Frames: t.Stacks.Frames(s.Stack)}
			rs.Stack = 0
			rs.Blocks = nil
			for _, b := range s.Blocks {
				rs.BlockFrames = append(rs.BlockFrames, t.Stacks.Frames(b.Stack))
				b.Stack = 0
				rs.Blocks = append(rs.Blocks, b)
			}
			out[i] = rs
		}
		return out
	}
	r := nativeResolved{Header: t.Header, Initial: segs(t.Initial), Rec: t.InitialReconstructed,
		Final: segs(t.Final), HasFin: t.HasFinal, Ann: t.Annotations}
	for _, e := range t.Events {
		f := t.Stacks.Frames(e.Stack)
		e.Stack = 0
		r.Events = append(r.Events, nativeResolvedEvent{e, f})
	}
	return r
}

func readNative(tb testing.TB, data []byte) (*Trace, error) {
	tb.Helper()
	r, err := NewNativeReader(bytes.NewReader(data), "test.mrt")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return ReadAll(r)
}

func TestNativeRoundTrip(t *testing.T) {
	for _, v := range nativeVersions {
		want := nativeSampleTrace()
		want.Header.Version = v
		data := writeNativeV(t, want, v)
		got, err := readNative(t, data)
		require.NoError(t, err)
		assert.Equal(t, nativeResolve(want), nativeResolve(got), "version %d", v)
		assert.Equal(t, want.Header, got.Header) // settings keep their types
		assert.IsType(t, int64(0), got.Header.AllocatorSettings["max_split_size"])
		// Writing what was read gives the same bytes: nothing was lost or
		// renumbered.
		assert.Equal(t, data, writeNativeV(t, got, v))
	}
}

func TestNativeRoundTripEmpty(t *testing.T) {
	for _, v := range nativeVersions {
		for _, tr := range []*Trace{
			{Stacks: NewStacks()},
			{Stacks: NewStacks(), InitialReconstructed: true, HasFinal: true},
			{Header: Header{AllocatorSettings: map[string]any{}, Devices: []Device{}, Notes: []string{}}, Stacks: NewStacks()},
		} {
			got, err := readNative(t, writeNativeV(t, tr, v))
			require.NoError(t, err)
			tr.Header.Version = v
			assert.Equal(t, nativeResolve(tr), nativeResolve(got))
		}
	}
}

func TestNativeGenerated(t *testing.T) {
	for _, v := range nativeVersions {
		want := genTrainingTrace(200_000, 7)
		want.Header.Version = v
		data := writeNativeV(t, want, v)
		got, err := readNative(t, data)
		require.NoError(t, err)
		require.Equal(t, len(want.Events), len(got.Events))
		assert.Equal(t, nativeResolve(want), nativeResolve(got))
		t.Logf("version %d: %d events, %d bytes, %.2f bytes/event", v, len(want.Events), len(data), float64(len(data))/float64(len(want.Events)))
	}
}

// Events from different stack tables land in one file table.
func TestNativeWriterMixesStackTables(t *testing.T) {
	a, b := NewStacks(), NewStacks()
	fa := []Frame{{"a.py", 1, "f"}}
	fb := []Frame{{"b.py", 2, "g"}, {"a.py", 1, "f"}}
	ida, idb := a.Intern(fa), b.Intern(fb)
	b.Intern(fa) // same frames, different ID in b
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{})
	require.NoError(t, err)
	require.NoError(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: ida}, a))
	require.NoError(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: idb}, b))
	require.NoError(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: b.Intern(fa)}, b))
	require.NoError(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: ida}, a))
	require.NoError(t, w.Close())
	got, err := readNative(t, buf.Bytes())
	require.NoError(t, err)
	require.Len(t, got.Events, 4)
	assert.Equal(t, fa, got.Stacks.Frames(got.Events[0].Stack))
	assert.Equal(t, fb, got.Stacks.Frames(got.Events[1].Stack))
	assert.Equal(t, got.Events[0].Stack, got.Events[2].Stack)
	assert.Equal(t, got.Events[0].Stack, got.Events[3].Stack)
	assert.Equal(t, 3, got.Stacks.NumStacks()) // empty + two
	assert.Equal(t, 2, got.Stacks.NumFrames())
}

func TestNativeWriterErrors(t *testing.T) {
	st := NewStacks()
	id := st.Intern([]Frame{{"a.py", 1, "f"}})
	newW := func() *Writer {
		w, err := NewWriter(io.Discard, Header{})
		require.NoError(t, err)
		return w
	}
	w := newW()
	assert.Error(t, w.WriteEvent(&Event{Action: ActionInvalid}, nil))
	assert.Error(t, w.WriteEvent(&Event{Action: 200}, nil))
	assert.ErrorContains(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: id}, nil), "without a stack table")
	assert.ErrorContains(t, w.WriteEvent(&Event{Action: ActionAlloc, Stack: 99}, st), "not in its table")
	require.NoError(t, w.WriteEvent(&Event{Action: ActionAlloc}, nil))
	assert.Error(t, w.SetInitial(nil, false), "SetInitial after an event")
	require.NoError(t, w.SetFinal(nil))
	assert.Error(t, w.WriteEvent(&Event{Action: ActionAlloc}, nil), "event after SetFinal")
	assert.Error(t, w.SetFinal(nil))
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())

	w = newW()
	assert.ErrorContains(t, w.SetInitial([]Segment{{Stack: id}}, false), "without a stack table")
	w = newW()
	w.SetStacks(st)
	require.NoError(t, w.SetInitial([]Segment{{Stack: id}}, false))
	assert.Error(t, w.SetInitial(nil, false), "twice")

	_, err := NewWriter(io.Discard, Header{AllocatorSettings: map[string]any{"x": struct{}{}}})
	assert.ErrorContains(t, err, "unsupported value type")
	_, err = NewWriter(io.Discard, Header{AllocatorSettings: map[string]any{"x": uint64(math.MaxUint64)}})
	assert.Error(t, err)
	assert.Error(t, newW().WriteEvent(&Event{Action: ActionMarker, Label: strings.Repeat("x", maxStringLen+1)}, nil))
}

func TestNativeWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.mrt")
	want := nativeSampleTrace()
	require.NoError(t, WriteFile(path, want))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := NewNativeReader(f, path)
	require.NoError(t, err)
	got, err := ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.Equal(t, nativeResolve(want), nativeResolve(got))
	ents, _ := os.ReadDir(filepath.Dir(path))
	assert.Len(t, ents, 1, "no temporary file left behind")
}

// The reader streams: Initial is ready before any event, Final only after
// io.EOF, and reading past the end keeps returning io.EOF.
func TestNativeReaderStreaming(t *testing.T) {
	want := nativeSampleTrace()
	r, err := NewNativeReader(bytes.NewReader(writeNative(t, want)), "x")
	require.NoError(t, err)
	init, rec := r.Initial()
	assert.Len(t, init, 3)
	assert.True(t, rec)
	_, ok := r.Final()
	assert.False(t, ok)
	var e Event
	require.NoError(t, r.Next(&e))
	assert.Equal(t, "trial 268", e.Label)
	for {
		if err := r.Next(&e); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
	}
	fin, ok := r.Final()
	assert.True(t, ok)
	assert.Len(t, fin, 1)
	assert.Equal(t, io.EOF, r.Next(&e))
	require.NoError(t, r.Close())
}

// Next allocates nothing per event (labels aside): the generated trace's
// only labels are one marker per iteration of ~430 events.
func TestNativeReaderAllocs(t *testing.T) {
	data := writeNative(t, genTrainingTrace(300_000, 3))
	r, err := NewNativeReader(bytes.NewReader(data), "x")
	require.NoError(t, err)
	defer r.Close()
	var e Event
	const batch = 1000
	allocs := testing.AllocsPerRun(200, func() {
		for i := 0; i < batch; i++ {
			if err := r.Next(&e); err != nil {
				t.Fatal(err)
			}
		}
	})
	// Labels: about 2.3 per 1000 events. Anything per event would be 1000.
	assert.Less(t, allocs, 10.0, "allocations per %d events", batch)
}

func mustFormatError(t *testing.T, err error) *FormatError {
	t.Helper()
	var fe *FormatError
	require.Error(t, err)
	require.True(t, errors.As(err, &fe), "want a *FormatError, got %T: %v", err, err)
	return fe
}

// Cutting the file anywhere gives a "truncated" error: never a panic, never
// a silently shorter trace.
func TestNativeTruncated(t *testing.T) {
	for _, v := range nativeVersions {
		tr := nativeSampleTrace()
		tr.Events[17].Label = "short" // keep the file small
		data := writeNativeV(t, tr, v)
		t.Logf("version %d: %d bytes", v, len(data))
		for n := 0; n < len(data); n++ {
			_, err := readNative(t, data[:n])
			fe := mustFormatError(t, err)
			if !assert.Contains(t, fe.Msg, "truncated", "version %d cut at %d of %d: %v", v, n, len(data), err) {
				break
			}
			assert.Equal(t, "test.mrt", fe.File)
		}
	}
}

// Flipping any single bit is either caught or harmless (never a panic, never
// a different trace).
func TestNativeCorrupt(t *testing.T) {
	for _, v := range nativeVersions {
		tr := nativeSampleTrace()
		tr.Events[17].Label = "short"
		tr.Header.Version = v
		data := writeNativeV(t, tr, v)
		want := nativeResolve(tr)
		undetected := 0
		for i := 0; i < len(data); i++ {
			for _, bit := range []byte{0x01, 0x10, 0x80} {
				c := bytes.Clone(data)
				c[i] ^= bit
				got, err := readNative(t, c)
				if err != nil {
					mustFormatError(t, err)
					continue
				}
				undetected++
				assert.Equal(t, want, nativeResolve(got), "version %d: byte %d bit %#x changed the trace without an error", v, i, bit)
			}
		}
		t.Logf("version %d: %d of %d flips did not change the decoded trace", v, undetected, 3*len(data))
	}
}

func TestNativeBadPrefix(t *testing.T) {
	data := writeNative(t, nativeSampleTrace())

	_, err := readNative(t, append([]byte("MRTRACE\x01"), data[8:]...))
	fe := mustFormatError(t, err)
	assert.Contains(t, fe.Msg, "bad magic")
	assert.Equal(t, int64(0), fe.Offset)

	_, err = readNative(t, []byte("PK\x03\x04 this is a zip"))
	assert.Contains(t, mustFormatError(t, err).Msg, "bad magic")

	for _, v := range []uint64{0, FormatVersion + 1, 1 << 40} {
		b := binary.AppendUvarint([]byte(nativeMagic), v)
		b = append(b, data[9:]...)
		_, err = readNative(t, b)
		fe = mustFormatError(t, err)
		assert.Contains(t, fe.Msg, "unsupported version "+strconv.FormatUint(v, 10))
		assert.Equal(t, int64(8), fe.Offset)
	}

	assert.True(t, IsNative(data))
	assert.True(t, IsNative(data[:8]))
	assert.False(t, IsNative(data[:7]))
	assert.False(t, IsNative([]byte("Thread,Time,Action,Pointer,Size,Stream\n")))
}

// nativeBody returns the decompressed body of a native file.
func nativeBody(tb testing.TB, data []byte) []byte {
	tb.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(data[9:]))
	require.NoError(tb, err)
	defer zr.Close()
	body, err := io.ReadAll(zr)
	require.NoError(tb, err)
	return body
}

var nativeTestEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))

// nativeFileOf wraps a body into a native file of the given version.
func nativeFileOf(version uint64, body []byte) []byte {
	b := binary.AppendUvarint([]byte(nativeMagic), version)
	return nativeTestEncoder.EncodeAll(body, b)
}

func nativeRecord(tag byte, payload ...byte) []byte {
	b := binary.AppendUvarint([]byte{tag}, uint64(len(payload)))
	return append(b, payload...)
}

// nativeSplitEnd returns the body without its end record, and the end record.
func nativeSplitEnd(tb testing.TB, body []byte) ([]byte, []byte) {
	tb.Helper()
	// The end record of a small trace is 0x86, len, count: 3 or 4 bytes.
	for k := 3; k <= 4; k++ {
		if body[len(body)-k] == tagEnd && int(body[len(body)-k+1]) == k-2 {
			return body[:len(body)-k], body[len(body)-k:]
		}
	}
	tb.Fatal("no end record")
	return nil, nil
}

// TestNativeRecordRules: the record layer's rules, on version 1 bodies
// (whose events carry their own times; TestNativeTimesRecordRules has
// version 2's).
func TestNativeRecordRules(t *testing.T) {
	tr := &Trace{Stacks: NewStacks(), Events: []Event{{Action: ActionAlloc, Addr: 256, Size: 8}}}
	body := nativeBody(t, writeNativeV(t, tr, 1))
	head, end := nativeSplitEnd(t, body)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	// The untouched body reads back.
	got, err := readNative(t, nativeFileOf(1, body))
	require.NoError(t, err)
	assert.Len(t, got.Events, 1)

	// Unknown ancillary records are skipped, wherever they are.
	got, err = readNative(t, nativeFileOf(1, cat(head, nativeRecord(0xc5, 1, 2, 3), nativeRecord(0xff), end)))
	require.NoError(t, err)
	assert.Len(t, got.Events, 1)

	// Unknown critical records stop the reader.
	_, err = readNative(t, nativeFileOf(1, cat(head, nativeRecord(0x9a, 1), end)))
	assert.Contains(t, mustFormatError(t, err).Msg, "unknown critical record tag 0x9a")

	// Known records may grow: trailing bytes are ignored.
	frame := appendString(nil, "f.py")
	frame = appendZigzag(frame, 3)
	frame = appendString(frame, "g")
	ev := []byte{byte(ActionAlloc) | evFlagStack, 1, 0, 0, 0}
	got, err = readNative(t, nativeFileOf(1, cat(head, nativeRecord(tagFrame, append(frame, 9, 9)...), nativeRecord(tagStack, 1, 0, 7), ev, nativeRecord(tagEnd, 2))))
	require.NoError(t, err)
	require.Len(t, got.Events, 2)
	assert.Equal(t, []Frame{{"f.py", 3, "g"}}, got.Stacks.Frames(got.Events[1].Stack))

	// Errors name the event and the body offset.
	_, err = readNative(t, nativeFileOf(1, cat(head, []byte{byte(ActionAlloc) | evFlagStack, 5, 0, 0, 0}, nativeRecord(tagEnd, 2))))
	fe := mustFormatError(t, err)
	assert.Equal(t, int64(1), fe.Event)
	assert.Equal(t, int64(len(head)), fe.Offset)
	assert.Contains(t, fe.Msg, "stack 5 is not defined")
	assert.Contains(t, fe.Error(), "decompressed body")

	cases := []struct {
		name string
		body []byte
		msg  string
	}{
		{"no header", cat(nativeRecord(tagEnd, 0)), "not the header"},
		{"empty body", nil, "truncated"},
		{"two headers", cat(head, nativeRecord(tagHeader, '{', '}'), end), "second header"},
		{"bad header json", cat(nativeRecord(tagHeader, '{'), end), "bad header"},
		{"wrong count", cat(head, nativeRecord(tagEnd, 5)), "counts 5 events, but 1"},
		{"data after end", cat(body, []byte{0}), "data after the end"},
		{"action 0", cat(head, []byte{0x00, 0, 0, 0}, end), "unknown action 0"},
		{"action 15", cat(head, []byte{0x0f, 0, 0, 0}, end), "unknown action 15"},
		{"undefined stream", cat(head, []byte{byte(ActionAlloc) | evFlagStream, 9, 0, 0, 0}, end), "stream reference 9"},
		{"device range", cat(head, append(appendZigzag([]byte{byte(ActionAlloc) | evFlagDevice}, 1<<40), 0, 0, 0), end), "device 1099511627776 out of range"},
		{"long varint", cat(head, []byte{byte(ActionAlloc), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0}, end), "bad varint"},
		{"stack of undefined frame", cat(head, nativeRecord(tagStack, 1, 0), end), "names frame 0, but 0"},
		{"empty stack", cat(head, nativeRecord(tagStack, 0), end), "with 0 frames"},
		{"huge stack", cat(head, nativeRecord(tagStack, 0xff, 0xff, 0x03), end), "frames in a"},
		{"huge record", cat(head, []byte{tagInitial, 0xff, 0xff, 0xff, 0xff, 0x0f}, end), "over the"},
		{"huge header", cat([]byte{tagHeader, 0x80, 0x80, 0x80, 0x10}, end), "over the"},
		{"lying record length", cat(head, []byte{tagInitial, 0xff, 0xff, 0xff, 0x7f}, end), "truncated"},
		{"lying ancillary length", cat(head, []byte{0xc0, 0xff, 0xff, 0xff, 0x7f}, end), "truncated"},
		{"huge segment count", cat(head, nativeRecord(tagFinal, 0xff, 0xff, 0xff, 0x7f), end), "segment count"},
		{"huge block count", cat(head, nativeRecord(tagFinal, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x7f), end), "block count"},
		{"bad block state", cat(head, nativeRecord(tagFinal, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0), end), "unknown block state 9"},
		{"segment stack", cat(head, nativeRecord(tagFinal, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0), end), "undefined stack"},
		{"short segment", cat(head, nativeRecord(tagFinal, 1, 0, 0), end), "does not fit"},
		{"short segment list", cat(head, nativeRecord(tagFinal, 0x80), end), "malformed segment list"},
		{"initial after events", cat(head, nativeRecord(tagInitial, 0, 0), end), "initial state after"},
		{"two finals", cat(head, nativeRecord(tagFinal, 0), nativeRecord(tagFinal, 0), end), "second final"},
		{"event after final", cat(head, nativeRecord(tagFinal, 0), []byte{byte(ActionAlloc), 0, 0, 0}, nativeRecord(tagEnd, 2)), "event after the final"},
		{"dangling extras", cat(head, nativeRecord(tagExtras, 1, 0), end), "extras record without"},
		{"two extras", cat(head, nativeRecord(tagExtras, 1, 0), nativeRecord(tagExtras, 1, 0), end), "two extras"},
		{"long label", cat(head, []byte{byte(ActionMarker), 0, 0, 0, 0x80, 0x80, 0x80, 0x01}, end), "label of"},
		{"bad string", cat(head, nativeRecord(tagFrame, 5, 'a'), end), "malformed frame"},
		{"times record in version 1", cat(head, nativeRecord(tagTimes, 1, 2), end), "unknown critical record tag 0x87"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readNative(t, nativeFileOf(1, c.body))
			fe := mustFormatError(t, err)
			assert.Contains(t, fe.Error(), c.msg)
		})
	}
}

// A corrupt compressed stream is reported as such, with zstd's reason.
func TestNativeChecksum(t *testing.T) {
	data := writeNative(t, nativeSampleTrace())
	c := bytes.Clone(data)
	c[len(c)-2] ^= 0xff // inside zstd's content checksum
	_, err := readNative(t, c)
	fe := mustFormatError(t, err)
	assert.Contains(t, fe.Msg, "corrupt compressed body")
	assert.ErrorIs(t, err, zstd.ErrCRCMismatch)
}

// A file written by each version must stay readable by every later one.
func TestNativeGolden(t *testing.T) {
	for _, v := range nativeVersions {
		path := filepath.Join("testdata", "native_v"+strconv.Itoa(v)+"_sample.mrt")
		want := nativeSampleTrace()
		want.Header.Version = v
		if *updateNative {
			require.NoError(t, writeFileAtomic(path, func(w io.Writer) error { return writeTrace(w, want, v) }))
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		got, err := readNative(t, data)
		require.NoError(t, err)
		assert.Equal(t, nativeResolve(want), nativeResolve(got), path)
	}
}

// FuzzNative feeds the input both as a whole file and as the decompressed
// body of one (mutating compressed bytes mostly just trips zstd's
// checksum, so the body is where the record parser gets exercised). Any
// trace that reads back must write and read again unchanged.
func FuzzNative(f *testing.F) {
	nativeFuzzSeeds(f)
	nativeDecoderConcurrency = 1 // thousands of tiny files: start fast
	f.Cleanup(func() { nativeDecoderConcurrency = 0 })
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, nativeFileOf(1, data), nativeFileOf(2, data)} {
			tr, err := readNative(t, in)
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("not a *FormatError: %T %v", err, err)
				}
				continue
			}
			// In the version it was read from: each writer's output must
			// read back.
			again, err := readNative(t, writeNativeV(t, tr, tr.Header.Version))
			if err != nil {
				t.Fatalf("rewritten trace does not read: %v", err)
			}
			if !assert.Equal(t, nativeResolve(tr), nativeResolve(again)) {
				t.FailNow()
			}
		}
	})
}

// nativeFuzzSeeds adds FuzzNative's and FuzzNextBatch's seeds: files and
// bodies of every version.
func nativeFuzzSeeds(f *testing.F) {
	for _, v := range nativeVersions {
		small := nativeSampleTrace()
		small.Events[17].Label = "short"
		file := writeNativeV(f, small, v)
		f.Add(file)
		f.Add(nativeBody(f, file))
		f.Add(nativeBody(f, writeNativeV(f, genTrainingTrace(300, 5), v)))
		f.Add(nativeBody(f, writeNativeV(f, &Trace{Stacks: NewStacks()}, v)))
		// With annotations records (before, between and after events).
		ann := nativeSampleTrace()
		ann.Annotations = []Annotation{
			{Device: 0, TimeUS: -3, Name: "zero_grad", Stage: "START", Event: 0},
			{Device: 0, TimeUS: 40, Name: "fwd", Stage: "END", Event: 5},
			{Device: 1, TimeUS: 1 << 40, Name: "fwd", Stage: "START", Event: int64(len(ann.Events))},
		}
		file = writeNativeV(f, ann, v)
		f.Add(file)
		f.Add(nativeBody(f, file))
	}
}

// Past maxStreamRefs distinct streams the table stops growing and streams
// are written literally; devices switch back and forth with their own
// address deltas.
func TestNativeManyStreamsAndDevices(t *testing.T) {
	tr := &Trace{Stacks: NewStacks()}
	for i := 0; i < 3*maxStreamRefs; i++ {
		s := uint64(i%(maxStreamRefs+500)) * 0x1000_0000_0001
		tr.Events = append(tr.Events, Event{Action: ActionAlloc, Device: int32(i % 5), Addr: uint64(i) << 20, Size: uint64(i), Stream: s, TimeUS: int64(i * 3)})
	}
	for _, v := range nativeVersions {
		data := writeNativeV(t, tr, v)
		got, err := readNative(t, data)
		require.NoError(t, err)
		tr.Header.Version = v
		assert.Equal(t, nativeResolve(tr), nativeResolve(got))
	}
}

// TestNativeTimesRecordRules: version 2's times records. Events take their
// times from the last times record, in order, each delta from the time
// before (across records too); an event with no time left for it, a times
// record or the end while times are left over, and a malformed or huge
// record are errors.
func TestNativeTimesRecordRules(t *testing.T) {
	head, end0 := nativeSplitEnd(t, nativeBody(t, writeNativeV(t, &Trace{Stacks: NewStacks()}, 2)))
	require.Equal(t, []byte{tagEnd, 1, 0}, end0)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	ev := func(addrDelta byte) []byte { return []byte{byte(ActionAlloc), addrDelta, 8} } // no time field
	times := func(deltas ...int64) []byte {
		p := binary.AppendUvarint(nil, uint64(len(deltas)))
		for _, d := range deltas {
			p = appendZigzag(p, d)
		}
		return nativeRecord(tagTimes, p...)
	}
	end := func(n byte) []byte { return nativeRecord(tagEnd, n) }

	// Times chain across records; the control records between events
	// (here an ancillary one) do not take a time.
	body := cat(head, times(5, -2), ev(0), nativeRecord(0xc1, 1), ev(2), times(10), ev(2), end(3))
	for _, k := range []int{1, 2, 128} {
		got, err := drainBatch(t, nativeFileOf(2, body), k)
		require.Equal(t, io.EOF, err)
		require.Len(t, got, 3)
		assert.Equal(t, []int64{5, 3, 13}, []int64{got[0].TimeUS, got[1].TimeUS, got[2].TimeUS})
		assert.Equal(t, []uint64{0, 1, 2}, []uint64{got[0].Addr, got[1].Addr, got[2].Addr})
	}
	got, err := drainNext(t, nativeFileOf(2, body))
	require.Equal(t, io.EOF, err)
	assert.Equal(t, []int64{5, 3, 13}, []int64{got[0].TimeUS, got[1].TimeUS, got[2].TimeUS})

	cases := []struct {
		name string
		body []byte
		msg  string
	}{
		{"no times record", cat(head, ev(0), end(1)), "event without a time"},
		{"times run out", cat(head, times(1), ev(0), ev(0), end(2)), "event without a time"},
		{"times left at the end", cat(head, times(1, 1), ev(0), end(1)), "1 times of the last times record have no event"},
		{"times left at the final", cat(head, times(1, 1), ev(0), nativeRecord(tagFinal, 0), end(1)), "have no event"},
		{"times left at the next record", cat(head, times(1, 1), ev(0), times(1), ev(0), end(2)), "while 1 times of the one before"},
		{"count over the bytes", cat(head, nativeRecord(tagTimes, 3, 0, 0), ev(0), end(1)), "times record of 3 times in 3 bytes"},
		{"count over the limit", cat(head, nativeRecord(tagTimes, append(binary.AppendUvarint(nil, maxTimesCount+1), make([]byte, maxTimesCount+1)...)...), end(0)), "at most 65536"},
		{"bad delta varint", cat(head, nativeRecord(tagTimes, 2, 0x80, 0x80), ev(0), end(1)), "malformed times record"},
		{"v1 event layout", cat(head, times(1), []byte{byte(ActionAlloc), 0, 8, 0}, end(1)), "unknown action 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := drainNext(t, nativeFileOf(2, c.body))
			assert.Contains(t, mustFormatError(t, err).Error(), c.msg)
			_, berr := drainBatch(t, nativeFileOf(2, c.body), 64)
			assert.Equal(t, err.Error(), berr.Error(), "NextBatch reports what Next does")
		})
	}
}

// TestNativeTimesBlocks: the version 2 writer puts the times record just
// before the first event it times, never more than timesBlock to a
// record, also where the buffer is flushed in the middle of a run (by a
// long label inline or in an extras record), and every event's time in
// one. Decoding the body's records by hand checks the layout itself, not
// only that the reader agrees with the writer.
func TestNativeTimesBlocks(t *testing.T) {
	tr := genTrainingTrace(5000, 9)
	tr.Events[1500].Label = strings.Repeat("x", writeFlushLen) // extras record: a flush inside a run
	tr.Events[3000] = Event{Action: ActionMarker, Label: strings.Repeat("y", writeFlushLen), TimeUS: tr.Events[3000].TimeUS}
	tr.HasFinal = true
	tr.Header.Version = 2
	data := writeNativeV(t, tr, 2)
	got, err := readNative(t, data)
	require.NoError(t, err)
	assert.Equal(t, nativeResolve(tr), nativeResolve(got))

	body := nativeBody(t, data)
	r := &nativeReader{buf: body, w: len(body), v2: true, stackMap: make([]StackID, 1<<20), devAddr: map[int32]uint64{}, streams: []uint64{0}}
	var counts []int
	var timed, events int
	for r.r < r.w {
		tag := body[r.r]
		if tag < tagControl {
			require.Greater(t, timed, events, "event %d at %d has no time", events, r.r)
			var e Event
			require.NoError(t, r.event(&e, tag))
			events++
			continue
		}
		n, i := uvar(body, r.r+1)
		require.Greater(t, i, 0)
		if tag == tagTimes {
			require.Equal(t, timed, events, "a times record at %d with times left", r.r)
			c, _ := uvar(body, i)
			counts = append(counts, int(c))
			timed += int(c)
			require.NoError(t, r.control(tag))
			continue
		}
		r.r = i + int(n)
	}
	assert.Equal(t, len(tr.Events), events)
	assert.Equal(t, events, timed)
	for _, c := range counts {
		assert.LessOrEqual(t, c, timesBlock)
		assert.Greater(t, c, 0)
	}
	assert.Less(t, len(counts), len(tr.Events)/100, "runs of many events: %v", counts)
	assert.Greater(t, len(counts), len(tr.Events)/timesBlock+1, "the flushes cut runs: %v", counts)
}

// A flipped bit is corruption, never truncation, however far the
// decompressor's read-ahead had got when it failed: the message follows
// zstd's error (io.ErrUnexpectedEOF only for a stream that ends early),
// the same for every reading of the same bytes.
func TestNativeCorruptIsNotTruncated(t *testing.T) {
	for _, v := range nativeVersions {
		good := writeNativeV(t, genTrainingTrace(20_000, 5), v)
		body := len(nativeMagic) + 1 // the zstd stream starts after magic and version
		for i := 0; i < 64; i++ {
			bad := bytes.Clone(good)
			at := body + 4 + (len(good)-body-4)*i/64
			bad[at] ^= 0x40
			_, err := readNative(t, bad)
			if err == nil {
				continue // a flip zstd's checks and ours both let through cannot be told
			}
			fe := mustFormatError(t, err)
			if strings.Contains(fe.Msg, "truncated") && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("v%d, bit flipped at %d of %d: %v", v, at, len(good), err)
			}
		}
	}
}

package trace

// The native trace format (docs/trace-format.md is the byte-by-byte
// reference; this comment is the map).
//
//	file    = magic "MRTRACE\x00" | uvarint version | zstd stream(body)
//	body    = header-record { record } end-record
//	record  = event | control
//	event   = tag(0x00-0x7f) fields...            (no length: the hot path)
//	          (version 2: its time from the last times record, 0x87)
//	control = tag(0x80-0xff) uvarint(len) payload  (skippable by length)
//
// Why this shape:
//
//   - The magic and the version sit outside the compressed stream so that
//     IsNative and "unsupported version N" need no decompression, and a
//     future version may change the compression.
//   - One zstd stream with its content checksum: zstd decompresses at about
//     1 GiB/s, far above what the event parser needs, and its checksum
//     catches corruption the record layer cannot see. The end record
//     carries the event count, and a reader reports any body that stops
//     before it as truncated, so a cut file never reads as a short trace.
//   - Events are the bulk (millions), so they carry no length prefix: the
//     tag byte holds the action (low 4 bits) and three flags saying which
//     of device, stream and stack are present. Everything else is a
//     varint: the address as a zigzag delta from the previous address on
//     the same device (allocations and frees cluster), the time as a
//     zigzag delta, the stream as an index into a stream table defined on
//     first use. A typical training-loop event is 5-8 bytes before zstd.
//   - Version 2 keeps the time deltas out of the event records: a times
//     record (a control record) holds those of the up to timesBlock
//     events after it. Jittery times broke zstd's matches at every event,
//     and zstd's decoding cost is per match; without them a training
//     loop's records repeat as long matches (timesBlock says by how much).
//     Version 1 files, times inline, are still read.
//   - Frames and stacks are interned into definition records written just
//     before their first use, so a writer can stream and a reader holds
//     only the tables, never the event list.
//   - Control records (header, definitions, segment lists, extras, end) are
//     length-prefixed. Tags 0x80-0xbf are critical: a reader that does not
//     know one stops with an error. Tags 0xc0-0xff are ancillary: a reader
//     that does not know one skips it. Within a known control record a
//     reader ignores bytes after the fields it knows, so a later revision
//     may append fields without a version bump. New actions or a new event
//     layout need a new version.
//   - Annotations (Trace.Annotations, PyTorch's external_annotations) are
//     not events: they go in annotations records (0xc0, ancillary, so a
//     reader that predates them skips them and loses only them), each with
//     the event index it comes before. An older reader of a newer file
//     then reads the same events, which marker events in the stream would
//     not have given it. A writer that has the whole list before the
//     events (WriteTrace, convert) puts it before them: a reader then has
//     it once the header is read (a replay stopped at an OOM still lists
//     them; a recording of it need not wait for them). One that learns
//     them as it goes (a replay's recording) puts them after the events,
//     where a reader has them at the end. Never both.
//   - The header is JSON: it is small, read once and meant to grow. JSON
//     numbers would turn allocator settings' int64 values into float64, so
//     setting values are written as one-key objects naming their type.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"

	"github.com/klauspost/compress/zstd"

	"github.com/memreplay/memreplay/internal/outfile"
)

// FormatVersion is the native format version this package writes, and the
// newest it reads. Version 2 moved the events' time deltas out of the
// event records into a times record before each run of events (see
// timesBlock); version 1 files are still read.
const FormatVersion = 2

// timesBlock is how many events' time deltas a version-2 writer puts in
// one times record (fewer when the buffer is flushed first). Why a column
// at all: zstd's decompression costs about one "sequence" (a match and
// the literals before it) per event when each event's record holds its
// own jittery time delta, since that byte breaks the match; with the
// deltas gathered apart, the rest of a training loop's records repeat
// step after step as long matches, and the deltas are entropy-coded
// literals. On BenchmarkReplay1M's trace that took zstd from about 9-15
// to 2.5 ns an event and the file from 0.90 to 0.69 bytes an event
// (docs/performance.md, "Issue 19: the native decoder's share"); 1024
// and 4096 events a record measured alike, 256 slower.
const timesBlock = 1024

// maxTimesCount bounds a times record's count, so a corrupt count cannot
// make a reader allocate much (the writer uses timesBlock).
const maxTimesCount = 1 << 16

// nativeDecoderConcurrency is the zstd decoder's concurrency; 0 is the
// library default (min(4, GOMAXPROCS)), which decompresses the next blocks
// on another goroutine while the caller parses and replays. Tests that open
// thousands of tiny files set 1, which starts faster.
var nativeDecoderConcurrency = 0

// nativeMagic opens every native trace file.
const nativeMagic = "MRTRACE\x00"

// IsNative reports whether prefix (the first bytes of a file, at least 8)
// starts with the native format's magic.
func IsNative(prefix []byte) bool {
	return len(prefix) >= len(nativeMagic) && string(prefix[:len(nativeMagic)]) == nativeMagic
}

// Record tags.
const (
	// Event tags: action in the low four bits, flags above.
	evActionMask = 0x0f
	evFlagDevice = 0x10 // zigzag device ordinal follows (else: previous event's)
	evFlagStream = 0x20 // stream reference follows (else: previous event's)
	evFlagStack  = 0x40 // uvarint stack ID follows (else: no stack)

	tagControl   = 0x80 // first control tag
	tagHeader    = 0x80 // JSON header; always the first record
	tagFrame     = 0x81 // frame definition
	tagStack     = 0x82 // stack definition
	tagInitial   = 0x83 // flags + segments: the state before the first event
	tagFinal     = 0x84 // segments: the state after the last event
	tagExtras    = 0x85 // DeviceFree and Label for the next event, when its action has no slot for them
	tagEnd       = 0x86 // event count; the last record
	tagTimes     = 0x87 // version 2: the time deltas of the events that follow
	tagAncillary = 0xc0 // 0xc0-0xff: records a reader may skip
	// tagAnnotations holds annotations (Trace.Annotations): ancillary, so
	// a reader older than it skips them and reads the rest of the trace.
	tagAnnotations = 0xc0
)

// annotationsPerRecord bounds the annotations one record holds, so a
// record stays small next to maxRecordLen whatever the names.
const annotationsPerRecord = 512

// Limits on sizes read from input, so that a corrupt length cannot make a
// reader allocate much more than the input really holds. Writers refuse
// to exceed them, so every file a Writer produces is readable.
const (
	maxStringLen  = 1 << 20 // labels, frame names, pool names
	maxHeaderLen  = 16 << 20
	maxRecordLen  = 1 << 30 // segment lists of a huge snapshot
	maxStreamRefs = 4096    // stream table entries; later streams are written literally
	// maxEventFixed bounds an event's bytes before its label text: the tag
	// and at most nine varints of up to 10 bytes.
	maxEventFixed = 1 + 9*binary.MaxVarintLen64
	readBufSize   = 64 << 10
	writeFlushLen = 128 << 10
)

// hasAddrDelta reports whether the action's address is written as a delta
// from the previous such address on the same device. The others (oom,
// markers, syncs) normally carry 0, which is cheaper written as is, and
// would spoil the next delta.
func hasAddrDelta(a Action) bool { return a >= ActionAlloc && a <= ActionSegmentUnmap }

// hasLabelSlot: the actions whose events carry their Label inline.
func hasLabelSlot(a Action) bool {
	return a == ActionTrialStart || a == ActionTrialEnd || a == ActionMarker
}

// ---------------------------------------------------------------------------
// Writer

// Writer streams a trace into the native format. Call SetInitial (optional,
// before the first event), WriteEvent for each event, SetFinal (optional,
// after the last event), then Close, which also stops the compressor's
// goroutines. Errors from the underlying writer are sticky; a rejected
// event or segment list (bad action, unknown stack) is not, and leaves the
// file valid.
type Writer struct {
	zw      *zstd.Encoder
	buf     []byte // uncompressed body not yet handed to zw
	scratch []byte // payload of the control record being built
	err     error  // sticky

	out     *Stacks // the file's own interning table
	maps    map[*Stacks]*stackMap
	lastSrc *Stacks
	lastMap *stackMap
	segSrc  *Stacks // table that Initial and Final segments' Stack fields refer to

	streams map[uint64]uint32 // stream -> table index

	dev     int32
	stream  uint64
	time    int64
	addr    uint64
	devAddr map[int32]uint64

	events     int64
	initialSet bool
	phase      int
	// annPast is the largest Event of the annotations written: Close
	// refuses a trace with fewer events (the reader would).
	annPast int64
	// annAhead: annotations were written before the first event, as the
	// whole list (a reader takes them so); none may follow the events.
	annAhead bool

	// Version 2's time column: the zigzag time deltas of the events in
	// buf from blockAt on (nt of them), written as a times record just
	// before those events when buf is flushed.
	version int
	times   []byte
	nt      int
	blockAt int
}

const (
	phaseStart  = iota // header written; SetInitial allowed
	phaseEvents        // events written
	phaseFinal         // SetFinal done; only Close
	phaseClosed
)

// stackMap maps one source table's stack IDs to the file's; 0 = not yet.
type stackMap struct{ ids []StackID }

// NewWriter writes the magic, the version and the header to w, and returns
// a Writer for the rest. Header.Version is ignored: the file is written as
// FormatVersion.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	return newWriter(w, h, FormatVersion)
}

// newWriter writes the given format version (1 or 2): the tests write
// version 1 files with it, since the reader must keep reading them.
func newWriter(w io.Writer, h Header, version int) (*Writer, error) {
	hj, err := encodeHeader(h)
	if err != nil {
		return nil, err
	}
	if len(hj) > maxHeaderLen {
		return nil, fmt.Errorf("trace: header is %d bytes, over the %d-byte limit", len(hj), maxHeaderLen)
	}
	pre := binary.AppendUvarint([]byte(nativeMagic), uint64(version))
	if _, err := w.Write(pre); err != nil {
		return nil, err
	}
	// A 2 MiB window: 8 MiB saves under 2% on a million-event training
	// loop but makes every reader allocate four times the history.
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true), zstd.WithWindowSize(2<<20))
	if err != nil {
		return nil, err
	}
	nw := &Writer{
		zw:      zw,
		buf:     make([]byte, 0, writeFlushLen+4096),
		out:     NewStacks(),
		maps:    map[*Stacks]*stackMap{},
		streams: map[uint64]uint32{0: 0},
		devAddr: map[int32]uint64{},
		version: version,
	}
	nw.appendRecord(tagHeader, hj)
	return nw, nil
}

// SetStacks names the table that the Stack fields of the segments given to
// SetInitial and SetFinal refer to. WriteEvent also uses it when called
// with a nil table.
func (w *Writer) SetStacks(st *Stacks) { w.segSrc = st }

// SetInitial records the allocator state before the first event. Call it at
// most once, before the first WriteEvent. Segment and block Stack fields
// refer to the table given to SetStacks.
func (w *Writer) SetInitial(segs []Segment, reconstructed bool) error {
	if w.err != nil {
		return w.err
	}
	if w.phase != phaseStart || w.initialSet {
		return errors.New("trace: SetInitial must be called once, before the first event")
	}
	var flags byte
	if reconstructed {
		flags |= 1
	}
	if err := w.writeSegments(tagInitial, []byte{flags}, segs, w.segSrc); err != nil {
		return err
	}
	w.initialSet = true
	return nil
}

// SetFinal records the allocator state after the last event; no event may
// follow. Stack fields refer to the table given to SetStacks or, without
// one, to the table of the last WriteEvent.
func (w *Writer) SetFinal(segs []Segment) error {
	if w.err != nil {
		return w.err
	}
	if w.phase >= phaseFinal {
		return errors.New("trace: SetFinal called twice or after Close")
	}
	src := w.segSrc
	if src == nil {
		src = w.lastSrc
	}
	if err := w.writeSegments(tagFinal, nil, segs, src); err != nil {
		return err
	}
	w.phase = phaseFinal
	return nil
}

// WriteAnnotations records annotations (Trace.Annotations), in their
// order, each with its Event, which must be at most the number of events
// the trace will have. Call it before SetFinal and Close. Called before
// the first event, it writes the whole list (a reader has it once the
// header is read), and may not be called again after events; called
// after events (a reader has them once it has read the whole trace), it
// may be called more than once, the lists follow one another.
func (w *Writer) WriteAnnotations(ann []Annotation) error {
	if w.err != nil {
		return w.err
	}
	if w.phase >= phaseFinal {
		return errors.New("trace: WriteAnnotations after SetFinal or Close")
	}
	if len(ann) == 0 {
		return nil
	}
	if w.annAhead && w.events > 0 {
		return errors.New("trace: WriteAnnotations after the events, the list having been written before them")
	}
	// All are checked first: a rejected list writes nothing, and leaves
	// the file valid.
	past := w.annPast
	for i := range ann {
		a := &ann[i]
		if !isStage(a.Stage) {
			return fmt.Errorf("trace: annotation %q: stage %q, want START or END", a.Name, a.Stage)
		}
		if a.Device < 0 || a.Event < 0 || a.Name == "" || len(a.Name) > maxStringLen {
			return fmt.Errorf("trace: annotation %q: device %d, event %d, name of %d bytes: out of range", a.Name, a.Device, a.Event, len(a.Name))
		}
		past = max(past, a.Event)
	}
	w.annPast = past
	w.annAhead = w.annAhead || w.events == 0
	var p []byte
	for len(ann) > 0 && w.err == nil {
		part := ann[:min(len(ann), annotationsPerRecord)]
		ann = ann[len(part):]
		p = binary.AppendUvarint(p[:0], uint64(len(part)))
		for i := range part {
			a := &part[i]
			stage := byte(0)
			if a.Stage == "END" {
				stage = 1
			}
			p = binary.AppendUvarint(p, uint64(a.Event))
			p = binary.AppendUvarint(p, uint64(a.Device))
			p = appendZigzag(p, a.TimeUS)
			p = append(p, stage)
			p = appendString(p, a.Name)
		}
		w.appendRecord(tagAnnotations, p)
	}
	return w.err
}

// WriteEvent appends one event. Its Stack refers to st (or, when st is
// nil, to the SetStacks table); the writer interns the frames into the
// file's own table, so events from any source can be mixed.
func (w *Writer) WriteEvent(e *Event, st *Stacks) error {
	if w.err != nil {
		return w.err
	}
	if w.phase >= phaseFinal {
		return errors.New("trace: WriteEvent after SetFinal or Close")
	}
	a := e.Action
	if a == ActionInvalid || a >= numActions {
		return fmt.Errorf("trace: event %d: cannot write action %v", w.events, a)
	}
	if len(e.Label) > maxStringLen {
		return fmt.Errorf("trace: event %d: label of %d bytes is over the %d-byte limit", w.events, len(e.Label), maxStringLen)
	}
	var sid StackID
	if e.Stack != 0 {
		if st == nil {
			st = w.segSrc
		}
		var err error
		if sid, err = w.mapStack(st, e.Stack); err != nil {
			return fmt.Errorf("trace: event %d: %w", w.events, err)
		}
	}
	w.phase = phaseEvents
	// DeviceFree outside oom and Label outside trials and markers are rare;
	// a separate record keeps them lossless without a slot in every event.
	if a != ActionOOM && e.DeviceFree != 0 || !hasLabelSlot(a) && e.Label != "" {
		p := w.scratch[:0]
		p = binary.AppendUvarint(p, e.DeviceFree)
		p = appendString(p, e.Label)
		w.scratch = p
		w.appendRecord(tagExtras, p)
	}

	b := w.buf
	at := len(b)
	if w.nt == 0 {
		w.blockAt = at
	}
	tag := byte(a)
	b = append(b, 0)
	if e.Device != w.dev {
		tag |= evFlagDevice
		b = appendZigzag(b, int64(e.Device))
		w.devAddr[w.dev] = w.addr
		w.dev = e.Device
		w.addr = w.devAddr[e.Device]
	}
	if e.Stream != w.stream {
		tag |= evFlagStream
		if idx, ok := w.streams[e.Stream]; ok {
			b = binary.AppendUvarint(b, uint64(idx)+1)
		} else {
			b = append(b, 0)
			b = binary.AppendUvarint(b, e.Stream)
			if len(w.streams) < maxStreamRefs {
				w.streams[e.Stream] = uint32(len(w.streams))
			}
		}
		w.stream = e.Stream
	}
	if sid != 0 {
		tag |= evFlagStack
		b = binary.AppendUvarint(b, uint64(sid))
	}
	if hasAddrDelta(a) {
		b = appendZigzag(b, int64(e.Addr-w.addr))
		w.addr = e.Addr
	} else {
		b = binary.AppendUvarint(b, e.Addr)
	}
	b = binary.AppendUvarint(b, e.Size)
	if w.version == 1 {
		b = appendZigzag(b, e.TimeUS-w.time)
	} else {
		w.times = appendZigzag(w.times, e.TimeUS-w.time)
		w.nt++
	}
	w.time = e.TimeUS
	if a == ActionOOM {
		b = binary.AppendUvarint(b, e.DeviceFree)
	}
	if hasLabelSlot(a) {
		b = appendString(b, e.Label)
	}
	b[at] = tag
	w.buf = b
	w.events++
	if len(b) >= writeFlushLen || w.nt == timesBlock {
		w.flush()
	}
	return w.err
}

// Close writes the end record and finishes the compressed stream. It does
// not close the underlying writer.
func (w *Writer) Close() error {
	if w.phase == phaseClosed {
		return w.err
	}
	w.phase = phaseClosed
	if w.err == nil && w.annPast > w.events {
		// The reader would refuse the file: the end record is left out,
		// so it reads as cut short, and Close says why.
		w.err = fmt.Errorf("trace: an annotation comes before event %d, but the trace has %d events", w.annPast, w.events)
	}
	if w.err == nil {
		var p [binary.MaxVarintLen64]byte
		w.appendRecord(tagEnd, binary.AppendUvarint(p[:0], uint64(w.events)))
		w.flush()
	}
	if err := w.zw.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Events returns the number of events written so far.
func (w *Writer) Events() int64 { return w.events }

// flush hands buf to the compressor; in version 2 with the times record
// of its events (if any) inserted where the first of them starts.
func (w *Writer) flush() {
	if w.err == nil && w.nt > 0 {
		var c [binary.MaxVarintLen64]byte
		count := binary.AppendUvarint(c[:0], uint64(w.nt))
		var h [1 + 2*binary.MaxVarintLen64]byte
		rec := binary.AppendUvarint(append(h[:0], tagTimes), uint64(len(count)+len(w.times)))
		rec = append(rec, count...)
		for _, p := range [][]byte{w.buf[:w.blockAt], rec, w.times, w.buf[w.blockAt:]} {
			if w.err == nil {
				_, w.err = w.zw.Write(p)
			}
		}
	} else if w.err == nil && len(w.buf) > 0 {
		_, w.err = w.zw.Write(w.buf)
	}
	w.buf, w.times, w.nt = w.buf[:0], w.times[:0], 0
}

func (w *Writer) appendRecord(tag byte, payload []byte) {
	w.buf = append(w.buf, tag)
	w.buf = binary.AppendUvarint(w.buf, uint64(len(payload)))
	w.buf = append(w.buf, payload...)
	if len(w.buf) >= writeFlushLen {
		w.flush()
	}
}

// mapStack returns the file's ID for stack id of table src, writing the
// frame and stack definitions the first time.
func (w *Writer) mapStack(src *Stacks, id StackID) (StackID, error) {
	if id == 0 {
		return 0, nil
	}
	if src == nil {
		return 0, fmt.Errorf("stack %d given without a stack table", id)
	}
	m := w.lastMap
	if src != w.lastSrc {
		m = w.maps[src]
		if m == nil {
			m = &stackMap{}
			w.maps[src] = m
		}
		w.lastSrc, w.lastMap = src, m
	}
	if int(id) < len(m.ids) && m.ids[id] != 0 {
		return m.ids[id], nil
	}
	if int(id) >= src.NumStacks() {
		return 0, fmt.Errorf("stack %d is not in its table (%d stacks)", id, src.NumStacks())
	}
	idx := src.FrameIndices(id)
	outIdx := make([]uint32, len(idx))
	for i, fi := range idx {
		f := src.Frame(fi)
		if len(f.Filename) > maxStringLen || len(f.Name) > maxStringLen {
			return 0, fmt.Errorf("stack %d: frame name over the %d-byte limit", id, maxStringLen)
		}
		n := w.out.NumFrames()
		oi := w.out.AddFrame(f)
		if int(oi) == n {
			p := appendString(w.scratch[:0], f.Filename)
			p = appendZigzag(p, f.Line)
			p = appendString(p, f.Name)
			w.scratch = p
			w.appendRecord(tagFrame, p)
		}
		outIdx[i] = oi
	}
	n := w.out.NumStacks()
	out := w.out.InternIndices(outIdx)
	if int(out) == n {
		p := binary.AppendUvarint(w.scratch[:0], uint64(len(outIdx)))
		for _, fi := range outIdx {
			p = binary.AppendUvarint(p, uint64(fi))
		}
		w.scratch = p
		w.appendRecord(tagStack, p)
	}
	if int(id) >= len(m.ids) {
		m.ids = append(m.ids, make([]StackID, int(id)+1-len(m.ids))...)
	}
	m.ids[id] = out
	return out, nil
}

// writeSegments writes a segment-list record after the stack definitions
// its segments and blocks need.
func (w *Writer) writeSegments(tag byte, prefix []byte, segs []Segment, src *Stacks) error {
	// Map stacks first: mapping appends definition records to w.buf, which
	// must precede this record.
	ids := make([]StackID, 0, 2*len(segs))
	for i := range segs {
		s := &segs[i]
		if len(s.Pool) > maxStringLen {
			return fmt.Errorf("trace: segment %d: pool name over the %d-byte limit", i, maxStringLen)
		}
		id, err := w.mapStack(src, s.Stack)
		if err != nil {
			return fmt.Errorf("trace: segment %d: %w", i, err)
		}
		ids = append(ids, id)
		for j := range s.Blocks {
			id, err := w.mapStack(src, s.Blocks[j].Stack)
			if err != nil {
				return fmt.Errorf("trace: segment %d block %d: %w", i, j, err)
			}
			ids = append(ids, id)
		}
	}
	p := append(w.scratch[:0], prefix...)
	p = binary.AppendUvarint(p, uint64(len(segs)))
	k := 0
	for i := range segs {
		s := &segs[i]
		p = appendZigzag(p, int64(s.Device))
		p = binary.AppendUvarint(p, s.Address)
		p = binary.AppendUvarint(p, s.TotalSize)
		p = binary.AppendUvarint(p, s.Stream)
		p = appendString(p, s.Pool)
		p = appendZigzag(p, s.PoolID[0])
		p = appendZigzag(p, s.PoolID[1])
		var flags byte
		if s.Expandable {
			flags |= 1
		}
		p = append(p, flags)
		p = binary.AppendUvarint(p, uint64(ids[k]))
		k++
		p = binary.AppendUvarint(p, uint64(len(s.Blocks)))
		next := s.Address // blocks normally tile the segment: delta 0
		for j := range s.Blocks {
			bl := &s.Blocks[j]
			p = appendZigzag(p, int64(bl.Address-next))
			p = binary.AppendUvarint(p, bl.Size)
			p = binary.AppendUvarint(p, bl.RequestedSize)
			p = append(p, byte(bl.State))
			p = binary.AppendUvarint(p, uint64(ids[k]))
			k++
			next = bl.Address + bl.Size
		}
	}
	w.scratch = p
	if len(p) > maxRecordLen {
		return fmt.Errorf("trace: segment list of %d bytes is over the %d-byte limit", len(p), maxRecordLen)
	}
	w.appendRecord(tag, p)
	return w.err
}

// WriteTrace writes a whole trace in the native format.
func WriteTrace(w io.Writer, t *Trace) error {
	return writeTrace(w, t, FormatVersion)
}

// writeTrace is WriteTrace in the given format version (newWriter).
func writeTrace(w io.Writer, t *Trace, version int) error {
	nw, err := newWriter(w, t.Header, version)
	if err != nil {
		return err
	}
	nw.SetStacks(t.Stacks)
	if t.Initial != nil || t.InitialReconstructed {
		if err := nw.SetInitial(t.Initial, t.InitialReconstructed); err != nil {
			nw.Close()
			return err
		}
	}
	// The whole list is known: before the events (see the file comment).
	if err := nw.WriteAnnotations(t.Annotations); err != nil {
		nw.Close()
		return err
	}
	for i := range t.Events {
		if err := nw.WriteEvent(&t.Events[i], t.Stacks); err != nil {
			nw.Close()
			return err
		}
	}
	if t.HasFinal {
		if err := nw.SetFinal(t.Final); err != nil {
			nw.Close()
			return err
		}
	}
	return nw.Close()
}

// WriteFile writes a trace to path in the native format, through a
// temporary file and a rename (writeFileAtomic).
func WriteFile(path string, t *Trace) error {
	return writeFileAtomic(path, func(w io.Writer) error { return WriteTrace(w, t) })
}

// writeFileAtomic writes path with write, buffered, through
// internal/outfile: into a temporary file beside it renamed over path, so
// an existing file is never left half-written and a failure leaves no file
// behind; a device or FIFO is written through, a read-only file refused.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := outfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := newBufWriter(f)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.flush(); err != nil {
		return err
	}
	return f.Commit()
}

// bufWriter batches the encoder's small writes into large file writes.
type bufWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func newBufWriter(w io.Writer) *bufWriter { return &bufWriter{w: w, buf: make([]byte, 0, 1<<20)} }

func (b *bufWriter) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		if err := b.flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(b.buf) {
			n, err := b.w.Write(p)
			b.err = err
			return n, err
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *bufWriter) flush() error {
	if b.err == nil && len(b.buf) > 0 {
		_, b.err = b.w.Write(b.buf)
		b.buf = b.buf[:0]
	}
	return b.err
}

func appendZigzag(b []byte, v int64) []byte {
	return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ---------------------------------------------------------------------------
// Header (JSON)

// headerJSON is Header with the allocator settings in typed form. The
// embedded Header carries every other field under its Go name, so a field
// added to Header is written and read without a change here (the round-trip
// test checks the whole struct).
type headerJSON struct {
	Header
	// Version shadows Header's and stays empty: the file's version is the
	// one in its prefix.
	Version *int `json:",omitempty"`
	// AllocatorSettings shadows Header's: values are one-key objects
	// naming their type: {"b": true}, {"i": 123}, {"f": "0.8"} (decimal
	// text, so NaN and infinities survive), {"s": "x"}, {"m": {...}},
	// {"l": [...]}, {"n": true} (nil).
	AllocatorSettings map[string]any
}

func encodeHeader(h Header) ([]byte, error) {
	hj := headerJSON{Header: h}
	hj.Header.AllocatorSettings = nil
	if h.AllocatorSettings != nil {
		m, err := encodeSetting(h.AllocatorSettings)
		if err != nil {
			return nil, fmt.Errorf("trace: allocator_settings: %w", err)
		}
		hj.AllocatorSettings = m.(map[string]any)["m"].(map[string]any)
	}
	return json.Marshal(hj)
}

// encodeSetting turns an allocator setting value into its typed JSON form.
func encodeSetting(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return map[string]any{"n": true}, nil
	case bool:
		return map[string]any{"b": x}, nil
	case int64:
		return map[string]any{"i": x}, nil
	case int:
		return map[string]any{"i": int64(x)}, nil
	case int32:
		return map[string]any{"i": int64(x)}, nil
	case uint32:
		return map[string]any{"i": int64(x)}, nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d does not fit int64", x)
		}
		return map[string]any{"i": int64(x)}, nil
	case float64:
		return map[string]any{"f": strconv.FormatFloat(x, 'g', -1, 64)}, nil
	case float32:
		return map[string]any{"f": strconv.FormatFloat(float64(x), 'g', -1, 64)}, nil
	case string:
		return map[string]any{"s": x}, nil
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ev, err := encodeSetting(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = ev
		}
		return map[string]any{"m": m}, nil
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			ev, err := encodeSetting(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = ev
		}
		return map[string]any{"l": l}, nil
	}
	return nil, fmt.Errorf("unsupported value type %T", v)
}

func decodeSetting(v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, errors.New("setting value is not a one-key typed object")
	}
	for k, x := range m { // exactly one entry
		switch k {
		case "n":
			return nil, nil
		case "b":
			if b, ok := x.(bool); ok {
				return b, nil
			}
		case "i":
			if n, ok := x.(json.Number); ok {
				i, err := strconv.ParseInt(string(n), 10, 64)
				if err == nil {
					return i, nil
				}
			}
		case "f":
			if s, ok := x.(string); ok {
				f, err := strconv.ParseFloat(s, 64)
				if err == nil {
					return f, nil
				}
			}
		case "s":
			if s, ok := x.(string); ok {
				return s, nil
			}
		case "m":
			if mm, ok := x.(map[string]any); ok {
				out := make(map[string]any, len(mm))
				for key, e := range mm {
					d, err := decodeSetting(e)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", key, err)
					}
					out[key] = d
				}
				return out, nil
			}
		case "l":
			if l, ok := x.([]any); ok {
				out := make([]any, len(l))
				for i, e := range l {
					d, err := decodeSetting(e)
					if err != nil {
						return nil, fmt.Errorf("[%d]: %w", i, err)
					}
					out[i] = d
				}
				return out, nil
			}
		default:
			return nil, fmt.Errorf("unknown setting type %q", k)
		}
		return nil, fmt.Errorf("bad value for setting type %q", k)
	}
	return nil, errors.New("empty setting value")
}

func decodeHeader(p []byte) (Header, error) {
	var hj headerJSON
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	if err := d.Decode(&hj); err != nil {
		return Header{}, err
	}
	h := hj.Header
	if hj.AllocatorSettings != nil {
		h.AllocatorSettings = make(map[string]any, len(hj.AllocatorSettings))
		keys := make([]string, 0, len(hj.AllocatorSettings))
		for k := range hj.AllocatorSettings {
			keys = append(keys, k)
		}
		sort.Strings(keys) // deterministic error messages
		for _, k := range keys {
			v, err := decodeSetting(hj.AllocatorSettings[k])
			if err != nil {
				return Header{}, fmt.Errorf("allocator_settings: %s: %w", k, err)
			}
			h.AllocatorSettings[k] = v
		}
	}
	return h, nil
}

// ---------------------------------------------------------------------------
// Reader

// nativeReader streams a native trace. It holds the interning tables, the
// current buffer of decompressed body and one event: never the event list.
type nativeReader struct {
	name string
	zr   *zstd.Decoder

	buf  []byte
	r, w int   // unread bytes are buf[r:w]
	base int64 // body offset of buf[0]
	eof  bool  // the decoder has no more output
	rerr error // the decoder's error, other than io.EOF

	hdr      Header
	stacks   *Stacks
	frameMap []uint32  // file frame index -> stacks frame index
	stackMap []StackID // file stack ID -> stacks ID
	streams  []uint64

	dev     int32
	stream  uint64
	time    int64
	addr    uint64
	devAddr map[int32]uint64

	// Version 2: events take their times from the last times record,
	// held as absolute times; times[ti:] are the ones not yet taken.
	v2    bool
	times []int64
	ti    int

	extras    bool // an extras record is waiting for the next event
	xDevFree  uint64
	xLabel    string
	initial   []Segment
	initRec   bool
	initSeen  bool
	final     []Segment
	hasFinal  bool
	ann       []Annotation
	annNames  map[string]string // annName's interned names
	annAhead  bool              // the annotations came before the events: all of them
	events    int64
	plain     int64 // of those, decoded by plainEvents (tests check that it ran)
	inEvents  bool  // past the preamble: errors name an event index
	err       error // sticky; io.EOF once the end record checked out
	closedErr error
}

// NewNativeReader reads the magic, version, header and initial state of a
// native trace from r and returns a Reader for its events. name is used
// in error messages. Close releases the decompressor.
func NewNativeReader(r io.Reader, name string) (Reader, error) {
	ferr := func(off int64, msg string, err error) error {
		return &FormatError{File: name, Offset: off, Event: -1, Msg: msg, Err: err}
	}
	var magic [len(nativeMagic)]byte
	if n, err := io.ReadFull(r, magic[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if n == 0 || string(magic[:n]) == nativeMagic[:n] {
				return nil, ferr(int64(n), "truncated: the file ends inside the magic", nil)
			}
			return nil, ferr(0, "not a memreplay native trace (bad magic)", nil)
		}
		return nil, ferr(0, "reading the magic", err)
	}
	if !IsNative(magic[:]) {
		return nil, ferr(0, "not a memreplay native trace (bad magic)", nil)
	}
	var version uint64
	for i, shift := 0, uint(0); ; i, shift = i+1, shift+7 {
		var c [1]byte
		if _, err := io.ReadFull(r, c[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, ferr(int64(len(nativeMagic)+i), "truncated: the file ends inside the version", nil)
			}
			return nil, ferr(int64(len(nativeMagic)+i), "reading the version", err)
		}
		if i == binary.MaxVarintLen64-1 && c[0] > 1 || i >= binary.MaxVarintLen64 {
			return nil, ferr(int64(len(nativeMagic)), "bad version varint", nil)
		}
		version |= uint64(c[0]&0x7f) << shift
		if c[0] < 0x80 {
			break
		}
	}
	if version == 0 || version > FormatVersion {
		return nil, ferr(int64(len(nativeMagic)), fmt.Sprintf("unsupported version %d (this build reads versions 1 to %d)", version, FormatVersion), nil)
	}
	// A window cap keeps a hostile stream from asking for gigabytes; our
	// writer uses 2 MiB, zstd's default levels at most 8 MiB.
	opts := []zstd.DOption{zstd.WithDecoderMaxWindow(64 << 20)}
	if nativeDecoderConcurrency > 0 {
		opts = append(opts, zstd.WithDecoderConcurrency(nativeDecoderConcurrency))
	}
	zr, err := zstd.NewReader(r, opts...)
	if err != nil {
		return nil, ferr(int64(len(nativeMagic)), "starting the decompressor", err)
	}
	nr := &nativeReader{
		name:     name,
		zr:       zr,
		buf:      make([]byte, readBufSize),
		stacks:   NewStacks(),
		stackMap: []StackID{0}, // file stack 0 is the empty stack
		streams:  []uint64{0},
		devAddr:  map[int32]uint64{},
		v2:       version >= 2,
	}
	nr.hdr.Version = int(version)
	if err := nr.preamble(); err != nil {
		nr.Close()
		return nil, err
	}
	return nr, nil
}

// preamble reads the header and every record before the first event (or
// the final state, or the end), so Header, Stacks and Initial are ready.
func (r *nativeReader) preamble() error {
	r.fill(1 + binary.MaxVarintLen64)
	if r.r >= r.w {
		return r.shortErr(r.r, "the body is empty")
	}
	if r.buf[r.r] != tagHeader {
		return r.errAt(r.r, fmt.Sprintf("the body starts with tag 0x%02x, not the header record", r.buf[r.r]), nil)
	}
	for {
		if err := r.control(r.buf[r.r]); err != nil {
			return err
		}
		r.fill(1)
		if r.r >= r.w {
			return r.shortErr(r.r, "the body ends before the end record")
		}
		if t := r.buf[r.r]; t < tagControl || t == tagFinal || t == tagEnd {
			r.inEvents = true
			r.annAhead = len(r.ann) > 0
			return nil
		}
	}
}

func (r *nativeReader) Header() Header  { return r.hdr }
func (r *nativeReader) Stacks() *Stacks { return r.stacks }
func (r *nativeReader) Initial() ([]Segment, bool) {
	return r.initial, r.initRec
}

// Annotations returns the annotations, once Next has returned io.EOF.
// AnnotationsLater implements LaterReader: the annotations follow the
// events (AnnotationsComplete).
func (r *nativeReader) AnnotationsLater() bool { return !r.annAhead && r.err != io.EOF }

// StacksLater implements LaterReader: each stack comes before the first
// event that names it.
func (r *nativeReader) StacksLater() bool { return false }

func (r *nativeReader) Annotations() []Annotation {
	if !r.annAhead && r.err != io.EOF {
		return nil
	}
	return r.ann
}

func (r *nativeReader) Final() ([]Segment, bool) {
	if r.err != io.EOF {
		return nil, false
	}
	return r.final, r.hasFinal
}

func (r *nativeReader) Close() error {
	if r.zr != nil {
		r.zr.Close()
		r.zr = nil
	}
	if r.err == nil {
		r.err = &FormatError{File: r.name, Offset: -1, Event: r.events, Msg: "reader is closed"}
	}
	return nil
}

// Next fills e with the next event.
func (r *nativeReader) Next(e *Event) error {
	for {
		if r.err != nil {
			return r.err
		}
		if r.w-r.r < maxEventFixed {
			r.fill(maxEventFixed)
			if r.r >= r.w {
				r.fail(r.shortErr(r.r, "the body ends before the end record"))
				continue
			}
		}
		tag := r.buf[r.r]
		if tag < tagControl {
			if err := r.event(e, tag); err != nil {
				r.fail(err)
				continue
			}
			return nil
		}
		if err := r.control(tag); err != nil {
			r.fail(err)
		}
	}
}

// NextBatch decodes events into evs until it is full or the next record
// is an error or the end (see BatchReader). It is Next's loop, run once
// per batch rather than once per event behind an interface call.
func (r *nativeReader) NextBatch(evs []Event) (int, error) {
	n := 0
	for n < len(evs) {
		if r.err != nil {
			if n > 0 {
				return n, nil // the error is sticky: the next call returns it
			}
			return 0, r.err
		}
		if r.w-r.r < maxEventFixed {
			r.fill(maxEventFixed)
			if r.r >= r.w {
				r.fail(r.shortErr(r.r, "the body ends before the end record"))
				continue
			}
		}
		tag := r.buf[r.r]
		if tag < tagControl {
			// Most events are plain: decoded in a run, without the
			// general decoder's checks. The first one that is not
			// (or a control record, or the buffer's end) stops the run
			// and is read below or on the next turn.
			if k := r.plainEvents(evs[n:]); k > 0 {
				n += k
				continue
			}
			if err := r.event(&evs[n], tag); err != nil {
				r.fail(err)
				continue
			}
			n++
			continue
		}
		if err := r.control(tag); err != nil {
			r.fail(err)
		}
	}
	return n, nil
}

// plainActions are the actions of plain events (bit a set for action a):
// every one but oom, which carries the driver's free bytes, and those
// whose events carry a label.
const plainActions = 1<<numActions - 1 - 1<<ActionInvalid - 1<<ActionOOM -
	1<<ActionTrialStart - 1<<ActionTrialEnd - 1<<ActionMarker

// plainEvents decodes the run of plain events at r.r into evs and returns
// how many it decoded: NextBatch's fast path (issue 19: the general
// decoder was about 15 ns of a replayed event, this path 11 on the same
// body). A plain event is what a training loop writes nearly every time:
// a tag without the device and stream flags (same device and stream as
// the event before), an action without an oom or label field, a defined
// stack if any, and varints of at most eight bytes. With all of an
// event's bytes known to be in the buffer, its fields need no length or
// error checks, and the reader's state stays in locals for the run. Any
// other event, a control record, an event near the buffer's end, or one
// that would be an error stops the run without being consumed: event, the
// general decoder, then reads it (and reports the error, if it is one),
// so both paths decode alike; TestPlainEventsMatchEvent and FuzzNextBatch
// compare them with Next, which uses event alone.
func (r *nativeReader) plainEvents(evs []Event) int {
	if r.hasFinal || r.extras {
		return 0
	}
	b := r.buf[:r.w]
	// An event that starts at or before last has all of its bytes, and
	// eight bytes past each of its varints, in b.
	last := r.w - maxEventFixed
	i := r.r
	addr, time := r.addr, r.time
	dev, stream, stackMap := r.dev, r.stream, r.stackMap
	// Version 2: as many events as the times record has times left.
	v2 := r.v2
	var times []int64
	if v2 {
		times = r.times[r.ti:]
		evs = evs[:min(len(evs), len(times))]
	}
	n := 0
	for ; n < len(evs) && i <= last; n++ {
		tag := b[i]
		a := Action(tag & evActionMask)
		if tag&^(evActionMask|evFlagStack) != 0 || plainActions>>a&1 == 0 {
			break
		}
		j := i + 1
		var stack StackID
		var v uint64
		if tag&evFlagStack != 0 {
			if v = uint64(b[j]); v < 0x80 {
				j++
			} else if v, j = uvar8(b, j); j < 0 {
				break
			}
			if v == 0 || v >= uint64(len(stackMap)) {
				break
			}
			stack = stackMap[v]
		}
		x := uint64(b[j])
		if x < 0x80 {
			j++
		} else if x, j = uvar8(b, j); j < 0 {
			break
		}
		size := uint64(b[j])
		if size < 0x80 {
			j++
		} else if size, j = uvar8(b, j); j < 0 {
			break
		}
		if v2 {
			time = times[n]
		} else {
			dt := uint64(b[j])
			if dt < 0x80 {
				j++
			} else if dt, j = uvar8(b, j); j < 0 {
				break
			}
			time += unzigzag(dt)
		}
		if hasAddrDelta(a) {
			addr += uint64(unzigzag(x))
			x = addr
		}
		e := &evs[n]
		e.Action, e.Device, e.Addr, e.Size, e.Stream = a, dev, x, size, stream
		e.TimeUS, e.DeviceFree, e.Stack, e.Label = time, 0, stack, ""
		i = j
	}
	r.r, r.addr = i, addr
	if v2 {
		r.ti += n
	} else {
		r.time = time
	}
	r.events += int64(n)
	r.plain += int64(n)
	return n
}

// uvar8 decodes the uvarint of two to eight bytes at b[i:], where b holds
// at least eight bytes from i (the caller has tested the first byte): the
// value and the index after it, or, when it is longer, the value of its
// first eight bytes and -1 (uvar then reads on, and tells a valid nine-
// or ten-byte varint from a bad one). One bounds check for all eight
// bytes.
func uvar8(b []byte, i int) (uint64, int) {
	bb := b[i : i+8 : i+8]
	x := uint64(bb[0] & 0x7f)
	c := bb[1]
	x |= uint64(c&0x7f) << 7
	if c < 0x80 {
		return x, i + 2
	}
	c = bb[2]
	x |= uint64(c&0x7f) << 14
	if c < 0x80 {
		return x, i + 3
	}
	c = bb[3]
	x |= uint64(c&0x7f) << 21
	if c < 0x80 {
		return x, i + 4
	}
	c = bb[4]
	x |= uint64(c&0x7f) << 28
	if c < 0x80 {
		return x, i + 5
	}
	c = bb[5]
	x |= uint64(c&0x7f) << 35
	if c < 0x80 {
		return x, i + 6
	}
	c = bb[6]
	x |= uint64(c&0x7f) << 42
	if c < 0x80 {
		return x, i + 7
	}
	c = bb[7]
	x |= uint64(c&0x7f) << 49
	if c < 0x80 {
		return x, i + 8
	}
	return x, -1
}

func (r *nativeReader) fail(err error) {
	r.err = err
	if r.zr != nil {
		r.zr.Close()
		r.zr = nil
	}
}

// event decodes the event record at r.r. Every varint is read with the
// bounds-checked uvar; a short or overlong varint makes the index
// negative, which every later read passes along, so the error check is
// done once at the end instead of after each field.
func (r *nativeReader) event(e *Event, tag byte) error {
	start := r.r
	a := Action(tag & evActionMask)
	if a == ActionInvalid || a >= numActions {
		return r.errAt(start, fmt.Sprintf("unknown action %d in event tag 0x%02x", tag&evActionMask, tag), nil)
	}
	if r.hasFinal {
		return r.errAt(start, "event after the final state", nil)
	}
	if r.v2 && r.ti >= len(r.times) {
		return r.errAt(start, "event without a time (no times record left for it)", nil)
	}
	b := r.buf[:r.w]
	i := start + 1
	var v uint64
	if tag&evFlagDevice != 0 {
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			v = uint64(b[i])
			i++
		} else {
			v, i = uvar(b, i)
		}
		d := unzigzag(v)
		if i >= 0 {
			if d != int64(int32(d)) {
				return r.errAt(start, fmt.Sprintf("device %d out of range", d), nil)
			}
			r.devAddr[r.dev] = r.addr
			r.dev = int32(d)
			r.addr = r.devAddr[r.dev]
		}
	}
	if tag&evFlagStream != 0 {
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			v = uint64(b[i])
			i++
		} else {
			v, i = uvar(b, i)
		}
		if i >= 0 {
			if v == 0 {
				if uint(i) < uint(len(b)) && b[i] < 0x80 {
					v = uint64(b[i])
					i++
				} else {
					v, i = uvar(b, i)
				}
				if i >= 0 && len(r.streams) < maxStreamRefs {
					r.streams = append(r.streams, v)
				}
				r.stream = v
			} else if v <= uint64(len(r.streams)) {
				r.stream = r.streams[v-1]
			} else {
				return r.errAt(start, fmt.Sprintf("stream reference %d is not defined (%d defined)", v, len(r.streams)), nil)
			}
		}
	}
	var stack StackID
	if tag&evFlagStack != 0 {
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			v = uint64(b[i])
			i++
		} else {
			v, i = uvar(b, i)
		}
		if i >= 0 {
			if v == 0 || v >= uint64(len(r.stackMap)) {
				return r.errAt(start, fmt.Sprintf("stack %d is not defined (%d defined)", v, len(r.stackMap)), nil)
			}
			stack = r.stackMap[v]
		}
	}
	var addr uint64
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		addr = uint64(b[i])
		i++
	} else {
		addr, i = uvar(b, i)
	}
	if hasAddrDelta(a) {
		addr = r.addr + uint64(unzigzag(addr))
	}
	var size uint64
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		size = uint64(b[i])
		i++
	} else {
		size, i = uvar(b, i)
	}
	var dt uint64
	if r.v2 {
		// the time comes from the times record
	} else if uint(i) < uint(len(b)) && b[i] < 0x80 {
		dt = uint64(b[i])
		i++
	} else {
		dt, i = uvar(b, i)
	}
	var devFree uint64
	if a == ActionOOM {
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			devFree = uint64(b[i])
			i++
		} else {
			devFree, i = uvar(b, i)
		}
	}
	var label string
	if hasLabelSlot(a) {
		var n uint64
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			n = uint64(b[i])
			i++
		} else {
			n, i = uvar(b, i)
		}
		if i >= 0 {
			if n > maxStringLen {
				return r.errAt(start, fmt.Sprintf("label of %d bytes is over the %d-byte limit", n, maxStringLen), nil)
			}
			if i+int(n) > r.w {
				rel := i - start
				r.fill(rel + int(n))
				start, b = r.r, r.buf[:r.w]
				i = start + rel
				if i+int(n) > r.w {
					return r.shortErr(start, "the body ends inside an event")
				}
			}
			label = string(b[i : i+int(n)])
			i += int(n)
		}
	}
	if i < 0 {
		if i == errShort {
			return r.shortErr(start, "the body ends inside an event")
		}
		return r.errAt(start, "bad varint in an event", nil)
	}
	if hasAddrDelta(a) {
		r.addr = addr
	}
	time := r.time + unzigzag(dt)
	if r.v2 {
		time = r.times[r.ti]
		r.ti++
	} else {
		r.time = time
	}
	// Field by field: a composite literal is built on the stack and then
	// copied, and the copy's wide loads of narrow stores stall (this line
	// was a tenth of a replay).
	e.Action, e.Device, e.Addr, e.Size, e.Stream = a, r.dev, addr, size, r.stream
	e.TimeUS, e.DeviceFree, e.Stack, e.Label = time, devFree, stack, label
	if r.extras {
		if a != ActionOOM {
			e.DeviceFree = r.xDevFree
		}
		if !hasLabelSlot(a) {
			e.Label = r.xLabel
		}
		r.extras, r.xLabel = false, ""
	}
	r.r = i
	r.events++
	return nil
}

// control reads the control record at r.r.
func (r *nativeReader) control(tag byte) error {
	r.fill(1 + binary.MaxVarintLen64)
	start := r.r
	n, i := uvar(r.buf[:r.w], start+1)
	if i < 0 {
		if i == errShort {
			return r.shortErr(start, "the body ends inside a record header")
		}
		return r.errAt(start, "bad record length", nil)
	}
	hl := i - start
	if tag >= tagAncillary && tag != tagAnnotations {
		return r.skip(start, hl, n)
	}
	limit := uint64(maxRecordLen)
	if tag == tagHeader {
		limit = maxHeaderLen
	}
	if n > limit {
		return r.errAt(start, fmt.Sprintf("record length %d is over the %d-byte limit", n, limit), nil)
	}
	r.fill(hl + int(n))
	start = r.r
	if r.w-start < hl+int(n) {
		return r.shortErr(start, "the body ends inside a record")
	}
	p := payload{b: r.buf[start+hl : start+hl+int(n)]}
	if (tag == tagFinal || tag == tagEnd) && r.ti < len(r.times) {
		return r.errAt(start, fmt.Sprintf("%d times of the last times record have no event", len(r.times)-r.ti), nil)
	}
	var err error
	switch tag {
	case tagHeader:
		err = r.readHeader(start, p.b)
	case tagFrame:
		err = r.readFrame(start, &p)
	case tagStack:
		err = r.readStack(start, &p)
	case tagInitial:
		err = r.readInitial(start, &p)
	case tagFinal:
		err = r.readFinal(start, &p)
	case tagExtras:
		if r.extras {
			return r.errAt(start, "two extras records in a row", nil)
		}
		r.xDevFree = p.uvarint()
		r.xLabel = p.string()
		r.extras = true
		err = p.check(r, start, "extras")
	case tagAnnotations:
		err = r.readAnnotations(start, &p)
	case tagEnd:
		err = r.readEnd(start, hl+int(n), &p)
		if err == nil {
			return nil // r.err is io.EOF; r.r was left where it is
		}
	case tagTimes:
		if !r.v2 {
			return r.errAt(start, fmt.Sprintf("unknown critical record tag 0x%02x (written by a newer memreplay?)", tag), nil)
		}
		err = r.readTimes(start, &p)
	default:
		return r.errAt(start, fmt.Sprintf("unknown critical record tag 0x%02x (written by a newer memreplay?)", tag), nil)
	}
	if err != nil {
		return err
	}
	r.r = start + hl + int(n)
	return nil
}

// readTimes reads a times record (version 2): a count, then that many
// zigzag time deltas, each from the time before (the last one of the
// previous record, for the first), kept as absolute times for the events
// that follow. Every time of the previous record must have had its event.
func (r *nativeReader) readTimes(start int, p *payload) error {
	if r.ti < len(r.times) {
		return r.errAt(start, fmt.Sprintf("a times record while %d times of the one before have no event", len(r.times)-r.ti), nil)
	}
	n := p.uvarint()
	if n > maxTimesCount || n > uint64(len(p.b)-p.i) { // a time takes a byte at least
		return r.errAt(start, fmt.Sprintf("times record of %d times in %d bytes (at most %d)", n, len(p.b), maxTimesCount), nil)
	}
	if cap(r.times) < int(n) {
		r.times = make([]int64, n, max(int(n), timesBlock))
	}
	ts := r.times[:n]
	t := r.time
	// The one-byte test inline, as in the event decoder: nearly every
	// delta is one byte, and payload.uvarint's calls were most of this
	// record's cost.
	b, i := p.b, p.i
	for k := range ts {
		var d uint64
		if uint(i) < uint(len(b)) && b[i] < 0x80 {
			d = uint64(b[i])
			i++
		} else if d, i = uvar(b, i); i < 0 {
			return r.errAt(start, "malformed times record", nil)
		}
		t += unzigzag(d)
		ts[k] = t
	}
	r.times, r.ti, r.time = ts, 0, t
	return nil
}

func (r *nativeReader) readHeader(start int, p []byte) error {
	if r.base+int64(start) != 0 {
		return r.errAt(start, "a second header record", nil)
	}
	h, err := decodeHeader(p)
	if err != nil {
		return r.errAt(start, "bad header", err)
	}
	h.Version = r.hdr.Version
	r.hdr = h
	return nil
}

func (r *nativeReader) readFrame(start int, p *payload) error {
	var f Frame
	f.Filename = p.string()
	f.Line = unzigzag(p.uvarint())
	f.Name = p.string()
	if err := p.check(r, start, "frame"); err != nil {
		return err
	}
	if len(r.frameMap) >= math.MaxUint32 {
		return r.errAt(start, "too many frames", nil)
	}
	r.frameMap = append(r.frameMap, r.stacks.AddFrame(f))
	return nil
}

func (r *nativeReader) readStack(start int, p *payload) error {
	n := p.uvarint()
	if n == 0 || n > uint64(len(p.b)-p.i) {
		if p.bad {
			return p.check(r, start, "stack")
		}
		return r.errAt(start, fmt.Sprintf("stack definition with %d frames in a %d-byte record", n, len(p.b)), nil)
	}
	idx := make([]uint32, n)
	for k := range idx {
		fi := p.uvarint()
		if fi >= uint64(len(r.frameMap)) && !p.bad {
			return r.errAt(start, fmt.Sprintf("stack definition names frame %d, but %d are defined", fi, len(r.frameMap)), nil)
		}
		if p.bad {
			break
		}
		idx[k] = r.frameMap[fi]
	}
	if err := p.check(r, start, "stack"); err != nil {
		return err
	}
	if len(r.stackMap) >= math.MaxUint32 {
		return r.errAt(start, "too many stacks", nil)
	}
	r.stackMap = append(r.stackMap, r.stacks.InternIndices(idx))
	return nil
}

func (r *nativeReader) readInitial(start int, p *payload) error {
	if r.inEvents || r.initSeen {
		return r.errAt(start, "initial state after the first event or twice", nil)
	}
	flags := p.byte()
	segs, err := r.readSegments(start, p)
	if err != nil {
		return err
	}
	r.initial, r.initRec, r.initSeen = segs, flags&1 != 0, true
	return nil
}

func (r *nativeReader) readFinal(start int, p *payload) error {
	if r.hasFinal {
		return r.errAt(start, "a second final state", nil)
	}
	segs, err := r.readSegments(start, p)
	if err != nil {
		return err
	}
	r.final, r.hasFinal = segs, true
	return nil
}

func (r *nativeReader) readSegments(start int, p *payload) ([]Segment, error) {
	n := p.uvarint()
	// Each segment takes at least 10 bytes and each block 5: a count larger
	// than the record allows is corrupt, and must not size an allocation.
	if n > uint64(len(p.b)-p.i)/10 {
		if p.bad {
			return nil, p.check(r, start, "segment list")
		}
		return nil, r.errAt(start, fmt.Sprintf("segment count %d does not fit its %d-byte record", n, len(p.b)), nil)
	}
	if n == 0 {
		return nil, p.check(r, start, "segment list") // empty lists read back as nil
	}
	segs := make([]Segment, n)
	for k := range segs {
		s := &segs[k]
		dev := unzigzag(p.uvarint())
		if dev != int64(int32(dev)) && !p.bad {
			return nil, r.errAt(start, fmt.Sprintf("segment %d: device %d out of range", k, dev), nil)
		}
		s.Device = int32(dev)
		s.Address = p.uvarint()
		s.TotalSize = p.uvarint()
		s.Stream = p.uvarint()
		s.Pool = p.string()
		s.PoolID[0] = unzigzag(p.uvarint())
		s.PoolID[1] = unzigzag(p.uvarint())
		s.Expandable = p.byte()&1 != 0
		var ok bool
		if s.Stack, ok = r.stackRef(p.uvarint()); !ok && !p.bad {
			return nil, r.errAt(start, fmt.Sprintf("segment %d: undefined stack", k), nil)
		}
		nb := p.uvarint()
		if nb > uint64(len(p.b)-p.i)/5 {
			if p.bad {
				break
			}
			return nil, r.errAt(start, fmt.Sprintf("segment %d: block count %d does not fit the record", k, nb), nil)
		}
		if nb > 0 {
			s.Blocks = make([]Block, nb)
		}
		next := s.Address
		for j := range s.Blocks {
			bl := &s.Blocks[j]
			bl.Address = next + uint64(unzigzag(p.uvarint()))
			bl.Size = p.uvarint()
			bl.RequestedSize = p.uvarint()
			st := p.byte()
			if st > byte(BlockPendingFree) && !p.bad {
				return nil, r.errAt(start, fmt.Sprintf("segment %d block %d: unknown block state %d", k, j, st), nil)
			}
			bl.State = BlockState(st)
			if bl.Stack, ok = r.stackRef(p.uvarint()); !ok && !p.bad {
				return nil, r.errAt(start, fmt.Sprintf("segment %d block %d: undefined stack", k, j), nil)
			}
			next = bl.Address + bl.Size
		}
		if p.bad {
			break
		}
	}
	if err := p.check(r, start, "segment list"); err != nil {
		return nil, err
	}
	return segs, nil
}

func (r *nativeReader) stackRef(v uint64) (StackID, bool) {
	if v == 0 {
		return 0, true
	}
	if v >= uint64(len(r.stackMap)) {
		return 0, false
	}
	return r.stackMap[v], true
}

// readAnnotations reads an annotations record: a count, then for each
// the event it comes before, device, zigzag time, stage (0 START, 1 END)
// and name. readEnd checks the events against the trace's length.
func (r *nativeReader) readAnnotations(start int, p *payload) error {
	if r.annAhead {
		return r.errAt(start, "annotations after the events, the list having come before them", nil)
	}
	n := p.uvarint()
	// Each takes at least 5 bytes (three varints, the stage, the name's
	// length): a larger count is corrupt.
	if n > uint64(len(p.b)-p.i)/5 {
		return r.errAt(start, fmt.Sprintf("annotations record counts %d in %d bytes", n, len(p.b)), nil)
	}
	for range n {
		var a Annotation
		ev, dev := p.uvarint(), p.uvarint()
		a.TimeUS = unzigzag(p.uvarint())
		stage := p.byte()
		a.Name = r.annName(p)
		if p.bad {
			break
		}
		if ev > math.MaxInt64 || dev > math.MaxInt32 || stage > 1 || a.Name == "" {
			return r.errAt(start, fmt.Sprintf("annotation %d: event %d, device %d, stage %d, name %q: out of range", len(r.ann), ev, dev, stage, a.Name), nil)
		}
		a.Event, a.Device, a.Stage = int64(ev), int32(dev), "START"
		if stage == 1 {
			a.Stage = "END"
		}
		r.ann = append(r.ann, a)
	}
	return p.check(r, start, "annotations")
}

// annName reads an annotation's name, interned: a trace has a few range
// names repeated by the million, and a copy each would cost more than
// the rest of the annotation.
func (r *nativeReader) annName(p *payload) string {
	b := p.stringBytes()
	if s, ok := r.annNames[string(b)]; ok {
		return s
	}
	if r.annNames == nil {
		r.annNames = map[string]string{}
	}
	s := string(b)
	r.annNames[s] = s
	return s
}

// readEnd checks the end record and that nothing follows it; reaching the
// end of the zstd stream also verifies its checksum.
func (r *nativeReader) readEnd(start, recLen int, p *payload) error {
	n := p.uvarint()
	if err := p.check(r, start, "end"); err != nil {
		return err
	}
	if r.extras {
		return r.errAt(start, "extras record without a following event", nil)
	}
	if n != uint64(r.events) {
		return r.errAt(start, fmt.Sprintf("the end record counts %d events, but %d were read", n, r.events), nil)
	}
	for i := range r.ann {
		if r.ann[i].Event > r.events {
			return r.errAt(start, fmt.Sprintf("annotation %d comes before event %d, but the trace has %d events", i, r.ann[i].Event, r.events), nil)
		}
	}
	r.r = start + recLen
	if r.w == r.r {
		r.fill(1)
	}
	if r.w > r.r {
		return r.errAt(r.r, "data after the end record", nil)
	}
	if r.rerr != nil {
		return r.shortErr(r.r, "")
	}
	r.err = io.EOF
	if r.zr != nil {
		r.zr.Close()
		r.zr = nil
	}
	return nil
}

// skip passes over an ancillary record of hl header and n payload bytes.
func (r *nativeReader) skip(start, hl int, n uint64) error {
	off := r.base + int64(start)
	r.r += hl
	for n > 0 {
		if r.r == r.w {
			r.fill(1)
			if r.r == r.w {
				return r.shortErrOff(off, "the body ends inside a record")
			}
		}
		k := uint64(r.w - r.r)
		if k > n {
			k = n
		}
		r.r += int(k)
		n -= k
	}
	return nil
}

// fill makes at least n bytes available at buf[r:], unless the body ends
// first. It grows the buffer only when it is full of real data, so a
// corrupt length cannot allocate more than twice what the input holds.
func (r *nativeReader) fill(n int) {
	if r.w-r.r >= n || r.eof {
		return
	}
	if r.r > 0 {
		copy(r.buf, r.buf[r.r:r.w])
		r.base += int64(r.r)
		r.w -= r.r
		r.r = 0
	}
	for r.w < n && !r.eof {
		if r.w == len(r.buf) {
			nb := make([]byte, 2*len(r.buf))
			copy(nb, r.buf[:r.w])
			r.buf = nb
		}
		if r.zr == nil {
			r.eof = true
			break
		}
		m, err := r.zr.Read(r.buf[r.w:])
		r.w += m
		if err != nil {
			r.eof = true
			if err != io.EOF {
				r.rerr = err
			}
		}
	}
}

const bodyNote = " (offset in the decompressed body)"

func (r *nativeReader) eventIndex() int64 {
	if r.inEvents {
		return r.events
	}
	return -1
}

func (r *nativeReader) errAt(at int, msg string, err error) error {
	return &FormatError{File: r.name, Offset: r.base + int64(at), Event: r.eventIndex(), Msg: msg + bodyNote, Err: err}
}

// shortErr explains why bytes ran out at buf[at]: the decompressor failed
// (a corrupt or truncated compressed stream) or the body simply ended.
//
// A truncated zstd stream always fails with io.ErrUnexpectedEOF (checked
// at every cut of a multi-frame stream, with and without concurrent
// decoding); anything else is corruption. Whether the raw input had
// already reached its end cannot tell them apart: the decoder reads ahead
// in its own goroutines, so a flipped bit in a small file was called
// "truncated" or "corrupt" by how far the read-ahead had got.
func (r *nativeReader) shortErr(at int, what string) error {
	return r.shortErrOff(r.base+int64(at), what)
}

func (r *nativeReader) shortErrOff(off int64, what string) error {
	fe := &FormatError{File: r.name, Offset: off, Event: r.eventIndex()}
	switch {
	case errors.Is(r.rerr, io.ErrUnexpectedEOF):
		fe.Msg, fe.Err = "truncated: the compressed stream ends early"+bodyNote, r.rerr
	case r.rerr != nil:
		fe.Msg, fe.Err = "corrupt compressed body"+bodyNote, r.rerr
	default:
		fe.Msg = "truncated: " + what + bodyNote
	}
	return fe
}

// payload decodes the fields of one control record. Reads past its end
// set bad and return zeros; check turns that into one error.
type payload struct {
	b   []byte
	i   int
	bad bool
}

func (p *payload) uvarint() uint64 {
	v, j := uvar(p.b, p.i)
	if j < 0 {
		p.bad = true
		p.i = len(p.b)
		return 0
	}
	p.i = j
	return v
}

func (p *payload) byte() byte {
	if p.i >= len(p.b) {
		p.bad = true
		return 0
	}
	p.i++
	return p.b[p.i-1]
}

func (p *payload) string() string { return string(p.stringBytes()) }

// stringBytes is string's bytes, not copied (nil when malformed).
func (p *payload) stringBytes() []byte {
	n := p.uvarint()
	if n > maxStringLen || n > uint64(len(p.b)-p.i) {
		p.bad = true
		p.i = len(p.b)
		return nil
	}
	b := p.b[p.i : p.i+int(n)]
	p.i += int(n)
	return b
}

func (p *payload) check(r *nativeReader, start int, what string) error {
	if p.bad {
		return r.errAt(start, "malformed "+what+" record", nil)
	}
	return nil
}

const (
	errShort = -1 // the bytes ended inside a varint
	errLong  = -2 // a varint longer than 64 bits
)

// uvar decodes a uvarint at b[i:], returning the value and the index after
// it, or a negative index (errShort, errLong) on error. A negative i is
// passed through, so a chain of reads needs one check at its end. The
// event decoder, which is the hot path, tests the one-byte case itself
// before calling: uvar is over the inlining budget.
func uvar(b []byte, i int) (uint64, int) {
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	if i < 0 {
		return 0, i
	}
	if len(b)-i >= binary.MaxVarintLen64 {
		// Unrolled: the first eight bytes as plainEvents reads them.
		x, j := uvar8(b, i)
		if j >= 0 {
			return x, j
		}
		bb := b[i+8 : i+binary.MaxVarintLen64 : i+binary.MaxVarintLen64]
		c := bb[0]
		x |= uint64(c&0x7f) << 56
		if c < 0x80 {
			return x, i + 9
		}
		c = bb[1]
		if c > 1 {
			return 0, errLong
		}
		return x | uint64(c)<<63, i + 10
	}
	var x uint64
	var s uint
	for k := 0; k < binary.MaxVarintLen64; k++ {
		if i+k >= len(b) {
			return 0, errShort
		}
		c := b[i+k]
		if c < 0x80 {
			if k == binary.MaxVarintLen64-1 && c > 1 {
				return 0, errLong
			}
			return x | uint64(c)<<s, i + k + 1
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, errLong
}

func unzigzag(v uint64) int64 { return int64(v>>1) ^ -int64(v&1) }

package trace

// The PyTorch memory snapshot writer: a Trace to the dict that
// torch.cuda.memory._snapshot() returns, pickled so that three readers open
// it: pytorch.org/memory_viz (a small unpickler in JavaScript), Python's
// pickle.load, and ReadPyTorch. It is the reverse of pytorch.go.
//
// What is written. The top-level dict has PyTorch's keys in PyTorch's
// order (section 5.2 of ../shared/docs/pytorch-caching-allocator.md):
//   - "segments": t.Final, one dict per segment with device, address,
//     total_size, allocated_size, active_size, requested_size (the sums
//     PyTorch computes from the blocks), stream, segment_type,
//     segment_pool_id (a 2-tuple), is_expandable, frames and blocks
//     (address, size, requested_size, state, frames). A trace without
//     Final writes an empty list when it has events (block sizes cannot be
//     rebuilt from the events without the allocator, which codecs do not
//     import), and its Initial segments when it has none (then the state
//     the events leave is the initial one). memory_viz's
//     "Active Memory Timeline" needs only device_traces; its "Allocator
//     State History" walks the trace backwards from the segments, so it is
//     meaningful only with an end state.
//   - "device_traces": one list per device ordinal from 0 to the highest
//     device the header, the events or the segments name (at least one
//     list, so the viewer has a device to show), each the device's events
//     in trace order. Reading the file back yields device 0's events, then
//     device 1's, and so on (ReadPyTorch's order): only the order within a
//     device is kept, as in PyTorch, which records no order across devices.
//   - "allocator_settings": Header.AllocatorSettings, PyTorch's keys first
//     in PyTorch's order, other keys sorted; left out when nil. Known keys
//     must have the types PyTorch writes (ReadPyTorch checks them).
//   - "external_annotations": t.Annotations (pytorch_annot.go), as
//     PyTorch's {stage, name, device, time_us}, in the list's order (time
//     order); left out when there are none. Their Event is not written:
//     ReadPyTorch places them among the entries again by their times.
//
// The initial state (Initial) has no place in a snapshot and is not
// written: memory_viz and the replay's reconstruction both infer what
// existed before the first entry from the segments and the entries.
//
// Actions. PyTorch's nine trace entry actions are written under their own
// names (alloc, free_requested, free_completed, segment_alloc,
// segment_free, segment_map, segment_unmap, oom, and snapshot markers), an
// oom with device_free in place of addr (an oom's Addr, other events'
// DeviceFree and non-markers' Label have no place and are not written).
// memreplay's own actions map to what PyTorch would write:
//   - marker: written as an entry whatever its shape (a marker of a
//     record_function annotation's shape, ≈2.4's form, stays a
//     user_defined entry: it is one). PyTorch's markers are
//     "snapshot", "annotate" and
//     "user_defined" (≈2.4's record_function annotations, whose one frame
//     names the range); ReadPyTorch reads them back as markers labelled
//     "snapshot", "annotate", and the label the first frame gives
//     (UserDefinedLabel: the filename of a frame named START or END, else
//     the name; "user_defined" when it is empty). A marker labelled "snapshot" or
//     "annotate" is written under that action; any other marker is written
//     as "user_defined", with its stack as it is when the stack's first
//     frame already carries the label (a marker read from PyTorch), and
//     otherwise with a frame {filename: "memreplay", line: 0, name: label}
//     put in front of its stack ({filename: label, name: label} for a label
//     START or END, which that frame would not give back). An empty label reads back as
//     "user_defined".
//   - trial_start and trial_end: a trial is a range, and PyTorch writes a
//     record_function range as two user_defined entries whose one frame is
//     {filename: the range's name, line: 0, name: "START" or "END"}; a
//     trial is written that way (the name is the label, or "trial" when
//     it has none, and the trial's stack, if any, follows the frame). They
//     read back as markers: the trial structure does not survive.
//   - empty_cache, stream_sync, record_stream: PyTorch's trace has no such
//     entries (an empty_cache shows only as the segment_free entries it
//     caused), so they are left out. A replay of the written file infers
//     empty_cache calls as it does for any PyTorch snapshot, and guesses
//     the streams of deferred frees.
//
// Everything else round-trips exactly: ReadPyTorch(WritePyTorch(t)) has
// t's PyTorch events (per device, in order) with the same fields, the same
// Final, the same frames for every stack, and the same settings, as the
// tests check on every real snapshot.
//
// Values. Addresses and streams are written as PyTorch writes pointers and
// cudaStream_t: the int64 with the same 64 bits (ReadPyTorch takes them
// back as those bits). Sizes are byte counts and must be below 2^63: a
// larger one is an error, since PyTorch cannot have recorded it and
// ReadPyTorch refuses negative sizes. Strings that are not valid UTF-8 are
// written with each bad byte replaced by U+FFFD, because Python's
// pickle.load refuses them.
//
// Opcodes. memory_viz decodes the file with the function unpickle in
// torch/utils/viz/MemoryViz.js (read in pytorch/pytorch at commits
// 00067369c9339bed950762afec327514d6fa2566 and
// c4b5ac720f8359f20813826d66b5e880bfdf07ca, which agree on the set),
// which knows only these opcodes: PROTO (versions 2 to 4 only: a
// protocol 5 pickle is refused), FRAME, MARK, STOP, EMPTY_DICT,
// EMPTY_LIST, EMPTY_TUPLE, DICT, LIST, TUPLE, TUPLE1, TUPLE2, TUPLE3,
// SETITEM, SETITEMS, APPEND, APPENDS, BININT, BININT1, BININT2, LONG1,
// BINFLOAT, NEWTRUE, NEWFALSE, NONE, BINUNICODE, SHORT_BINUNICODE,
// BINGET, LONG_BINGET, BINPUT, LONG_BINPUT, MEMOIZE; anything else throws
// "UNKNOWN OPCODE". This writer emits a subset in the style of protocol 2
// (PROTO 2; all of them are in pickle.go's accepted set too):
//
//	PROTO 2, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, TUPLE2,
//	BINUNICODE, BININT1, BININT2, BININT, LONG1, BINFLOAT, NEWTRUE,
//	NEWFALSE, NONE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET, STOP.
//
// Two details of MemoryViz.js shape the output. A LONG1 payload of more
// than 8 bytes is an error in the older version and a JavaScript BigInt,
// which breaks its arithmetic, in the newer, so every int is written in
// at most 8 bytes (minimal two's complement, as Python writes it; the
// viewer turns 8 bytes into a Number, exact below 2^53, which covers
// every CUDA address). APPENDS spreads its items into one call
// (arr.push(...items)), which overflows the JavaScript stack for long
// lists (a million-entry device trace in one batch fails in Node with
// "Maximum call stack size exceeded"), so lists and dicts are filled in
// batches of 1000 (MARK ... APPENDS per batch, as Python's pickler does)
// rather than in one batch as PyTorch's C++ pickler does.
//
// Memo. Every string, frame dict and frame list is stored in the memo
// (BINPUT) the first time and referenced (BINGET) after that, and blocks
// and segments without a stack share one empty frame list, as PyTorch's
// own snapshots do: an entry whose stack was written before refers to it
// in 2 or 5 bytes, so a real training step's entries average under 60
// bytes. Entry, segment and block dicts are never shared: memory_viz
// annotates them in place.
//
// Streaming. The entries come last but the memo is numbered in file
// order, so an entry's bytes depend on everything before it, the end
// state included. Writers that see the events one at a time spool them
// (spool.go: PyTorchSpool) and write through this same ptWriter at the
// end, event by event from the spool, which is why snapshot takes the
// device lists as a function: the bytes are the same either way. The
// entry loop is the hot path of a big snapshot (tens of millions of
// entries): the keys and action names are appended as ready BINGETs once
// memoised, frame lists are looked up by StackID in a slice, and the
// buffer goes to w through a goroutine (asyncwrite.go) so that encoding
// overlaps the write.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WritePyTorch writes t as a PyTorch memory snapshot pickle (the dict that
// torch.cuda.memory._snapshot() returns): "segments" from t.Final (or,
// when t has no Final, an empty list, or t.Initial when t has no events
// either), "device_traces" (one list per device, the trace entries), and
// "allocator_settings" from the header. memreplay's own actions are mapped
// or left out as the comment at the top of pytorch_write.go describes.
// Nothing is written past the first error of w, which is returned.
func WritePyTorch(w io.Writer, t *Trace) error {
	if t == nil {
		return errors.New("trace: WritePyTorch: nil trace")
	}
	ndev, err := ptDeviceCount(t)
	if err != nil {
		return err
	}
	pw := newPTWriter(w, t.Stacks)
	pw.async = newAsyncWriter(w, cap(pw.buf))
	return pw.finish(pw.snapshot(t, len(t.Events) > 0, ndev, pw.traceEvents(t, ndev)))
}

// WritePyTorchFile writes to path through a temporary file and a rename,
// so a failure never leaves a truncated file under the name.
func WritePyTorchFile(path string, t *Trace) error {
	return writeFileAtomic(path, func(w io.Writer) error { return WritePyTorch(w, t) })
}

// ptWhere names what is being written, for error messages; it is
// formatted only when there is an error.
type ptWhere struct {
	kind string // "event", "segment", "final segment", ...
	i, j int    // the index; j >= 0: block j of segment i
}

func (w ptWhere) String() string {
	switch {
	case w.kind == "header":
		return w.kind
	case w.j >= 0:
		return fmt.Sprintf("%s %d block %d", w.kind, w.i, w.j)
	}
	return fmt.Sprintf("%s %d", w.kind, w.i)
}

// maxPTDevices bounds the device ordinals written: every ordinal below the
// highest gets a list, and CUDA numbers devices densely from 0.
const maxPTDevices = 1 << 16

// ptBatch is how many items go between a MARK and its APPENDS or
// SETITEMS (Python's pickler uses the same).
const ptBatch = 1000

// ptFlushAt is the buffer size at which the writer hands bytes to w.
const ptFlushAt = 64 << 10

// memoryVizOpcodes is the set of opcodes MemoryViz.js's unpickle accepts
// (see the file comment); the tests check every emitted opcode against it.
var memoryVizOpcodes = map[byte]string{
	opPROTO: "PROTO", opFRAME: "FRAME", opMARK: "MARK", opSTOP: "STOP",
	opEMPTY_DICT: "EMPTY_DICT", opEMPTY_LIST: "EMPTY_LIST", opEMPTY_TUPLE: "EMPTY_TUPLE",
	'd': "DICT", 'l': "LIST", opTUPLE: "TUPLE", opTUPLE1: "TUPLE1", opTUPLE2: "TUPLE2",
	opTUPLE3: "TUPLE3", opSETITEM: "SETITEM", opSETITEMS: "SETITEMS",
	opAPPEND: "APPEND", opAPPENDS: "APPENDS", opBININT: "BININT", opBININT1: "BININT1",
	opBININT2: "BININT2", opLONG1: "LONG1", opBINFLOAT: "BINFLOAT",
	opNEWTRUE: "NEWTRUE", opNEWFALSE: "NEWFALSE", opNONE: "NONE",
	opBINUNICODE: "BINUNICODE", opSHORT_BINUNICODE: "SHORT_BINUNICODE",
	opBINGET: "BINGET", opLONG_BINGET: "LONG_BINGET", opBINPUT: "BINPUT",
	opLONG_BINPUT: "LONG_BINPUT", opMEMOIZE: "MEMOIZE",
}

// ptWriter is one encoding run.
type ptWriter struct {
	w      io.Writer
	async  *asyncWriter // when set, buffers go to w through it
	buf    []byte
	err    error // the first error; nothing is written after it
	stacks *Stacks
	// The memo: the next index, and where each shared object went.
	next      uint64
	strMemo   map[string]uint32
	frameMemo map[Frame]uint32
	// stackMemo is the memo index + 1 of each stack's frame list, by
	// StackID (0: not written yet): a slice, as IDs are dense and every
	// entry looks its stack up.
	stackMemo []uint32
	emptyList int64 // memo index of the shared empty frame list, -1 before
	scratch   []Frame
	// The BINGETs of the strings every entry repeats, once memoised.
	kAction, kAddr, kSize, kStream, kTimeUS, kFrames, kDeviceFree ptGet
	kNames                                                        [ptNumNames]ptGet
	entryKeys                                                     bool // all of the above but kFrames, kDeviceFree and kNames are set
}

// ptGet is a memoised string's BINGET or LONG_BINGET, ready to append
// (n 0: not memoised yet).
type ptGet struct {
	n   uint8
	enc [5]byte
}

// put writes the BINGET at b[n:] (which has room for 5 bytes) and
// returns the end.
func (g *ptGet) put(b []byte, n int) int {
	*(*[5]byte)(b[n:]) = g.enc
	return n + int(g.n)
}

func (g *ptGet) set(idx uint32) {
	if idx < 256 {
		*g = ptGet{n: 2, enc: [5]byte{opBINGET, byte(idx)}}
		return
	}
	*g = ptGet{n: 5, enc: [5]byte{opLONG_BINGET, byte(idx), byte(idx >> 8), byte(idx >> 16), byte(idx >> 24)}}
}

// The action names an entry can have: PyTorch's actions by Action, then
// the three marker kinds.
const (
	ptNameSnapshot = int(numActions) + iota
	ptNameAnnotate
	ptNameUserDefined
	ptNumNames
)

func newPTWriter(w io.Writer, s *Stacks) *ptWriter {
	p := &ptWriter{
		w: w, buf: make([]byte, 0, ptFlushAt+4096), stacks: s,
		strMemo: map[string]uint32{}, frameMemo: map[Frame]uint32{},
		emptyList: -1,
	}
	return p
}

func (p *ptWriter) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("trace: writing a PyTorch snapshot: "+format, args...)
	}
}

func (p *ptWriter) flush() error {
	if p.err == nil && len(p.buf) > 0 {
		var err error
		if p.async != nil {
			p.buf, err = p.async.swap(p.buf)
		} else {
			_, err = p.w.Write(p.buf)
		}
		if err != nil {
			p.err = err
		}
	}
	p.buf = p.buf[:0]
	return p.err
}

// finish writes what is buffered and returns the first error, err (the
// encoder's) or the writer's.
func (p *ptWriter) finish(err error) error {
	if ferr := p.flush(); err == nil {
		err = ferr
	}
	if p.async != nil {
		if aerr := p.async.close(); err == nil {
			err = aerr
		}
		p.async = nil
	}
	return err
}

// op appends opcodes; the buffer goes to w once it is large.
func (p *ptWriter) op(b ...byte) {
	p.buf = append(p.buf, b...)
	if len(p.buf) >= ptFlushAt {
		p.flush()
	}
}

// put stores the value on top of the stack in the next memo slot and
// returns the slot; ok is false when the memo is full (2^32 slots), and
// the value is then simply not shared.
func (p *ptWriter) put() (idx uint32, ok bool) {
	if p.next > math.MaxUint32 {
		return 0, false
	}
	idx = uint32(p.next)
	p.next++
	if idx < 256 {
		p.op(opBINPUT, byte(idx))
	} else {
		p.op(opLONG_BINPUT, byte(idx), byte(idx>>8), byte(idx>>16), byte(idx>>24))
	}
	return idx, true
}

func (p *ptWriter) get(idx uint32) {
	if idx < 256 {
		p.op(opBINGET, byte(idx))
	} else {
		p.op(opLONG_BINGET, byte(idx), byte(idx>>8), byte(idx>>16), byte(idx>>24))
	}
}

func (p *ptWriter) str(s string) {
	if idx, ok := p.strMemo[s]; ok {
		p.get(idx)
		return
	}
	key := s
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if uint64(len(s)) > math.MaxUint32 {
		p.fail("a string of %d bytes is too long for BINUNICODE", len(s))
		return
	}
	n := uint32(len(s))
	p.op(opBINUNICODE, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	p.buf = append(p.buf, s...)
	if idx, ok := p.put(); ok {
		p.strMemo[key] = idx
	}
}

// key writes a string every entry repeats: from g once it is memoised.
func (p *ptWriter) key(s string, g *ptGet) {
	if g.n != 0 {
		p.buf = append(p.buf, g.enc[:g.n]...)
		return
	}
	p.str(s)
	if idx, ok := p.strMemo[s]; ok {
		g.set(idx)
	}
}

// int writes x in the shortest form: BININT1, BININT2, BININT, or LONG1
// with the minimal two's complement (at most 8 bytes).
func (p *ptWriter) int(x int64) { p.buf = appendPTInt(p.buf, x) }

func appendPTInt(b []byte, x int64) []byte {
	n := len(b)
	b = slices.Grow(b, ptIntMax)[:n+ptIntMax]
	return b[:putPTInt(b, n, x)]
}

// ptIntMax is the most bytes putPTInt writes: LONG1, a length, 8 bytes.
const ptIntMax = 10

// putPTInt writes x at b[n:] (which has room for ptIntMax bytes) and
// returns the end: BININT1, BININT2, BININT, or LONG1 with the minimal
// two's complement (at most 8 bytes), as Python writes it.
func putPTInt(b []byte, n int, x int64) int {
	switch {
	case x >= 0 && x < 1<<8:
		b[n], b[n+1] = opBININT1, byte(x)
		return n + 2
	case x >= 0 && x < 1<<16:
		b[n], b[n+1], b[n+2] = opBININT2, byte(x), byte(x>>8)
		return n + 3
	case x >= math.MinInt32 && x <= math.MaxInt32:
		b[n] = opBININT
		binary.LittleEndian.PutUint32(b[n+1:], uint32(x))
		return n + 5
	}
	// The bits the value needs, plus its sign bit, in whole bytes.
	mag := uint64(x)
	if x < 0 {
		mag = ^mag
	}
	size := (bits.Len64(mag) + 8) / 8
	b[n], b[n+1] = opLONG1, byte(size)
	binary.LittleEndian.PutUint64(b[n+2:], uint64(x))
	return n + 2 + size
}

// bits writes an address or stream: the int64 with the same bits.
func (p *ptWriter) bits(x uint64) { p.int(int64(x)) }

// size writes a byte count, which must fit in int64.
func (p *ptWriter) size(w ptWhere, field string, x uint64) {
	if x > math.MaxInt64 {
		p.fail("%v %s: %d bytes does not fit in int64", w, field, x)
		return
	}
	p.int(int64(x))
}

func (p *ptWriter) bool(b bool) {
	if b {
		p.op(opNEWTRUE)
	} else {
		p.op(opNEWFALSE)
	}
}

func (p *ptWriter) float(f float64) {
	var b [9]byte
	b[0] = opBINFLOAT
	binary.BigEndian.PutUint64(b[1:], math.Float64bits(f))
	p.op(b[:]...)
}

// batcher emits MARK before every ptBatch items and the closing opcode
// after them.
type batcher struct {
	p       *ptWriter
	n       int
	closeOp byte
}

func (p *ptWriter) batch(closeOp byte) batcher { return batcher{p: p, closeOp: closeOp} }

// item is called before each item (each key/value pair of a dict).
func (b *batcher) item() {
	if b.n%ptBatch == 0 {
		if b.n > 0 {
			b.p.op(b.closeOp)
		}
		b.p.op(opMARK)
	}
	b.n++
}

func (b *batcher) end() {
	if b.n > 0 {
		b.p.op(b.closeOp)
	}
}

// snapshot writes the snapshot of t, whose events (hasEvents: there are
// some, left out ones included) each writes device by device: t's own, or
// a spool's (t's Events are then empty).
func (p *ptWriter) snapshot(t *Trace, hasEvents bool, ndev int, each func(d int, b *batcher)) error {
	p.op(opPROTO, 2)
	p.op(opEMPTY_DICT)
	p.put()
	top := p.batch(opSETITEMS)

	top.item()
	p.str("segments")
	segs := t.Final
	if !t.HasFinal && !hasEvents {
		segs = t.Initial
	}
	p.segments(segs)

	top.item()
	p.str("device_traces")
	p.deviceTraces(ndev, each)

	if t.Header.AllocatorSettings != nil {
		top.item()
		p.str("allocator_settings")
		p.settings(t.Header.AllocatorSettings)
	}
	if len(t.Annotations) > 0 {
		top.item()
		p.str("external_annotations")
		p.annotations(t.Annotations)
	}
	top.end()
	p.op(opSTOP)
	return p.err
}

// ptDeviceCount is the number of device lists: one past the highest
// ordinal named anywhere, at least 1.
func ptDeviceCount(t *Trace) (int, error) {
	hi := int32(0)
	for i := range t.Events {
		if err := ptCheckDevice(ptWhere{"event", i, -1}, t.Events[i].Device); err != nil {
			return 0, err
		}
		hi = max(hi, t.Events[i].Device)
	}
	return ptStateDeviceCount(t, hi)
}

// ptStateDeviceCount is ptDeviceCount for t's header, Initial and Final,
// given the highest device of its events.
func ptStateDeviceCount(t *Trace, hi int32) (int, error) {
	see := func(what ptWhere, d int32) error {
		if err := ptCheckDevice(what, d); err != nil {
			return err
		}
		hi = max(hi, d)
		return nil
	}
	for _, d := range t.Header.Devices {
		if err := see(ptWhere{kind: "header"}, d.Index); err != nil {
			return 0, err
		}
	}
	for i := range t.Final {
		if err := see(ptWhere{"final segment", i, -1}, t.Final[i].Device); err != nil {
			return 0, err
		}
	}
	for i := range t.Initial {
		if err := see(ptWhere{"initial segment", i, -1}, t.Initial[i].Device); err != nil {
			return 0, err
		}
	}
	return int(hi) + 1, nil
}

func ptCheckDevice(what ptWhere, d int32) error {
	if d < 0 || d >= maxPTDevices {
		return fmt.Errorf("trace: writing a PyTorch snapshot: %v: device %d out of range [0, %d)", what, d, maxPTDevices)
	}
	return nil
}

func (p *ptWriter) segments(segs []Segment) {
	p.op(opEMPTY_LIST)
	b := p.batch(opAPPENDS)
	for i := range segs {
		if p.err != nil {
			return
		}
		b.item()
		p.segment(i, &segs[i])
	}
	b.end()
}

func (p *ptWriter) segment(i int, s *Segment) {
	var allocated, active, requested uint64
	for j := range s.Blocks {
		bl := &s.Blocks[j]
		if bl.Size > math.MaxInt64 || bl.RequestedSize > math.MaxInt64 {
			p.fail("segment %d block %d: size does not fit in int64", i, j)
			return
		}
		if bl.State == BlockAllocated {
			allocated += bl.Size
		}
		if bl.State == BlockAllocated || bl.State == BlockPendingFree {
			active += bl.Size
			requested += bl.RequestedSize
		}
		if allocated > math.MaxInt64 || active > math.MaxInt64 || requested > math.MaxInt64 {
			p.fail("segment %d: block sizes add up to more than int64 holds", i)
			return
		}
	}
	what := ptWhere{"segment", i, -1}
	p.op(opEMPTY_DICT, opMARK)
	p.str("device")
	p.int(int64(s.Device))
	p.str("address")
	p.bits(s.Address)
	p.str("total_size")
	p.size(what, "total_size", s.TotalSize)
	p.str("allocated_size")
	p.int(int64(allocated))
	p.str("active_size")
	p.int(int64(active))
	p.str("requested_size")
	p.int(int64(requested))
	p.str("stream")
	p.bits(s.Stream)
	p.str("segment_type")
	p.str(s.Pool)
	p.str("segment_pool_id")
	p.int(s.PoolID[0])
	p.int(s.PoolID[1])
	p.op(opTUPLE2)
	p.str("is_expandable")
	p.bool(s.Expandable)
	p.str("frames")
	p.frames(what, s.Stack, nil)
	p.str("blocks")
	p.op(opEMPTY_LIST)
	b := p.batch(opAPPENDS)
	for j := range s.Blocks {
		if p.err != nil {
			return
		}
		bl := &s.Blocks[j]
		b.item()
		p.op(opEMPTY_DICT, opMARK)
		p.str("address")
		p.bits(bl.Address)
		p.str("size")
		p.int(int64(bl.Size))
		p.str("requested_size")
		p.int(int64(bl.RequestedSize))
		p.str("state")
		if int(bl.State) >= len(blockStateNames) {
			p.fail("segment %d block %d: unknown block state %d", i, j, bl.State)
			return
		}
		p.str(blockStateNames[bl.State])
		p.str("frames")
		p.frames(ptWhere{"segment", i, j}, bl.Stack, nil)
		p.op(opSETITEMS)
	}
	b.end()
	p.op(opSETITEMS)
}

// deviceTraces writes one list per device, each filled by each.
func (p *ptWriter) deviceTraces(ndev int, each func(d int, b *batcher)) {
	p.op(opEMPTY_LIST)
	outer := p.batch(opAPPENDS)
	for d := 0; d < ndev; d++ {
		if p.err != nil {
			return
		}
		outer.item()
		p.op(opEMPTY_LIST)
		b := p.batch(opAPPENDS)
		each(d, &b)
		b.end()
	}
	outer.end()
}

// traceEvents returns the writer of t's events of one device, in trace
// order.
func (p *ptWriter) traceEvents(t *Trace, ndev int) func(d int, b *batcher) {
	single := true
	for i := range t.Events {
		if t.Events[i].Device != t.Events[0].Device {
			single = false
			break
		}
	}
	if single {
		return func(d int, b *batcher) {
			if len(t.Events) == 0 || int(t.Events[0].Device) != d {
				return
			}
			for i := range t.Events {
				if p.err != nil {
					return
				}
				p.event(i, &t.Events[i], b)
			}
		}
	}
	// Event indices grouped by device.
	start := make([]int, ndev+1)
	for i := range t.Events {
		start[t.Events[i].Device+1]++
	}
	for d := 1; d <= ndev; d++ {
		start[d] += start[d-1]
	}
	order := make([]int32, len(t.Events))
	fill := append([]int(nil), start[:ndev]...)
	for i := range t.Events {
		d := t.Events[i].Device
		order[fill[d]] = int32(i)
		fill[d]++
	}
	return func(d int, b *batcher) {
		for _, i := range order[start[d]:start[d+1]] {
			if p.err != nil {
				return
			}
			p.event(int(i), &t.Events[i], b)
		}
	}
}

// ptAction is the action an event is written under (-1 when it is left
// out: its name is ptActionName) and, for labels its stack does not
// carry, the frame put in front of its stack.
func (p *ptWriter) ptAction(e *Event) (action int, extra *Frame) {
	switch e.Action {
	case ActionAlloc, ActionFreeRequested, ActionFreeCompleted, ActionSegmentAlloc,
		ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap, ActionOOM:
		return int(e.Action), nil
	case ActionMarker:
		switch e.Label {
		case "snapshot":
			return ptNameSnapshot, nil
		case "annotate":
			return ptNameAnnotate, nil
		}
		label := e.Label
		if label == "" {
			label = "user_defined"
		}
		first := ""
		if idx := p.stacks.FrameIndices(e.Stack); len(idx) > 0 && int(idx[0]) < p.stacks.NumFrames() {
			first = UserDefinedLabel(p.stacks.Frame(idx[0]))
		}
		if first == label || (first == "" && label == "user_defined") {
			return ptNameUserDefined, nil
		}
		if isStage(e.Label) {
			return ptNameUserDefined, &Frame{Filename: e.Label, Name: e.Label}
		}
		return ptNameUserDefined, &Frame{Filename: "memreplay", Name: e.Label}
	case ActionTrialStart, ActionTrialEnd:
		f := &Frame{Filename: e.Label, Name: "START"}
		if e.Action == ActionTrialEnd {
			f.Name = "END"
		}
		if f.Filename == "" {
			f.Filename = "trial"
		}
		return ptNameUserDefined, f
	}
	return -1, nil
}

// ptActionName names ptAction's actions.
func ptActionName(action int) string {
	switch action {
	case ptNameSnapshot:
		return "snapshot"
	case ptNameAnnotate:
		return "annotate"
	case ptNameUserDefined:
		return "user_defined"
	}
	return Action(action).String()
}

// ptLeftOut reports whether an event of a valid action has no PyTorch
// equivalent and is not written.
func ptLeftOut(a Action) bool {
	switch a {
	case ActionEmptyCache, ActionStreamSync, ActionRecordStream:
		return true
	}
	return false
}

// event writes the device's next event.
func (p *ptWriter) event(i int, e *Event, b *batcher) { p.entry(i, e, b) }

// entry writes one trace entry. It is the writer's hot loop (a big
// snapshot is tens of millions of them): the keys and action names are
// appended as ready BINGETs once memoised, and the buffer is flushed once
// per entry.
func (p *ptWriter) entry(i int, e *Event, b *batcher) {
	action, extra := p.ptAction(e)
	if action < 0 {
		if e.Action == ActionInvalid || e.Action >= numActions {
			p.fail("event %d: invalid action %s", i, e.Action)
		}
		return
	}
	what := ptWhere{"event", i, -1}
	b.item()
	if p.entryKeys && e.Action != ActionOOM && e.Size <= math.MaxInt64 && p.kNames[action].n != 0 {
		p.entryFast(action, e)
	} else {
		p.entrySlow(what, action, e)
	}
	if e.Stack != 0 || extra != nil {
		p.key("frames", &p.kFrames)
		p.frames(what, e.Stack, extra)
	}
	p.op(opSETITEMS)
}

// ptEntryMax bounds what entryFast writes: EMPTY_DICT MARK, five keys and
// the action name (BINGETs of at most 5 bytes), four ints.
const ptEntryMax = 2 + 6*5 + 4*ptIntMax

// annotations writes external_annotations: PyTorch's dicts {stage, name,
// device, time_us}, in the list's order (Trace.Annotations is in time
// order, PyTorch's: one ring buffer for all devices). Event is not
// written: ReadPyTorch computes it from the times. A stage other than
// START and END, or an empty name, is an error: ReadPyTorch would skip
// the annotation.
func (p *ptWriter) annotations(ann []Annotation) {
	p.op(opEMPTY_LIST)
	l := p.batch(opAPPENDS)
	for i := range ann {
		a := &ann[i]
		if !isStage(a.Stage) || a.Name == "" {
			p.fail("annotation %d: stage %q, name %q: want START or END and a name", i, a.Stage, a.Name)
			return
		}
		if err := ptCheckDevice(ptWhere{"annotation", i, -1}, a.Device); err != nil {
			if p.err == nil {
				p.err = err
			}
			return
		}
		l.item()
		p.op(opEMPTY_DICT, opMARK)
		p.str("stage")
		p.str(a.Stage)
		p.str("name")
		p.str(a.Name)
		p.str("device")
		p.int(int64(a.Device))
		p.str("time_us")
		p.int(a.TimeUS)
		p.op(opSETITEMS)
	}
	l.end()
}

// entryFast writes an entry's fields but frames straight into the
// buffer, once every key it names is memoised (entryKeys, and its action's
// name); an oom's entry takes the slow way.
func (p *ptWriter) entryFast(action int, e *Event) {
	n := len(p.buf)
	b := slices.Grow(p.buf, ptEntryMax)[:n+ptEntryMax]
	b[n], b[n+1] = opEMPTY_DICT, opMARK
	n += 2
	n = p.kAction.put(b, n)
	n = p.kNames[action].put(b, n)
	n = p.kAddr.put(b, n)
	n = putPTInt(b, n, int64(e.Addr))
	n = p.kSize.put(b, n)
	n = putPTInt(b, n, int64(e.Size))
	n = p.kStream.put(b, n)
	n = putPTInt(b, n, int64(e.Stream))
	n = p.kTimeUS.put(b, n)
	n = putPTInt(b, n, e.TimeUS)
	p.buf = b[:n]
}

// entrySlow writes what entryFast does, memoising the keys the first
// time, checking the sizes, and writing an oom's device_free.
func (p *ptWriter) entrySlow(what ptWhere, action int, e *Event) {
	p.buf = append(p.buf, opEMPTY_DICT, opMARK)
	p.key("action", &p.kAction)
	p.key(ptActionName(action), &p.kNames[action])
	if e.Action == ActionOOM {
		p.key("device_free", &p.kDeviceFree)
		p.size(what, "device_free", e.DeviceFree)
	} else {
		p.key("addr", &p.kAddr)
		p.bits(e.Addr)
	}
	p.key("size", &p.kSize)
	p.size(what, "size", e.Size)
	p.key("stream", &p.kStream)
	p.bits(e.Stream)
	p.key("time_us", &p.kTimeUS)
	p.int(e.TimeUS)
	p.entryKeys = p.kAction.n != 0 && p.kAddr.n != 0 && p.kSize.n != 0 && p.kStream.n != 0 && p.kTimeUS.n != 0
}

// frames writes a stack as a list of frame dicts, through the memo; extra,
// when set, is a frame put in front (such lists are not shared).
func (p *ptWriter) frames(what ptWhere, id StackID, extra *Frame) {
	if id == 0 && extra == nil {
		if p.emptyList >= 0 {
			p.get(uint32(p.emptyList))
			return
		}
		p.op(opEMPTY_LIST)
		if idx, ok := p.put(); ok {
			p.emptyList = int64(idx)
		}
		return
	}
	if extra == nil && int(id) < len(p.stackMemo) && p.stackMemo[id] != 0 {
		p.get(p.stackMemo[id] - 1)
		return
	}
	if id != 0 && (p.stacks == nil || int(id) >= p.stacks.NumStacks()) {
		p.fail("%v: stack %d is not in the stack table", what, id)
		return
	}
	frames := p.scratch[:0]
	if extra != nil {
		frames = append(frames, *extra)
	}
	if id != 0 {
		nf := p.stacks.NumFrames()
		for _, fi := range p.stacks.FrameIndices(id) {
			if int(fi) >= nf {
				p.fail("%v: stack %d names frame %d, not in the table", what, id, fi)
				return
			}
			frames = append(frames, p.stacks.Frame(fi))
		}
	}
	p.scratch = frames[:0]
	p.op(opEMPTY_LIST)
	if extra == nil {
		if idx, ok := p.put(); ok && idx < math.MaxUint32 {
			if int(id) >= len(p.stackMemo) {
				p.stackMemo = append(p.stackMemo, make([]uint32, int(id)+1-len(p.stackMemo))...)
			}
			p.stackMemo[id] = idx + 1
		}
	}
	b := p.batch(opAPPENDS)
	for _, f := range frames {
		b.item()
		p.frame(f)
	}
	b.end()
}

// frame writes one frame dict, keys in PyTorch's order.
func (p *ptWriter) frame(f Frame) {
	if idx, ok := p.frameMemo[f]; ok {
		p.get(idx)
		return
	}
	p.op(opEMPTY_DICT)
	idx, ok := p.put()
	p.op(opMARK)
	p.str("name")
	p.str(f.Name)
	p.str("filename")
	p.str(f.Filename)
	p.str("line")
	p.int(f.Line)
	p.op(opSETITEMS)
	if ok {
		p.frameMemo[f] = idx
	}
}

// ptSettingOrder is the order of PyTorch's allocator_settings keys.
var ptSettingOrder = map[string]int{
	"PYTORCH_CUDA_ALLOC_CONF": 1, "PYTORCH_ALLOC_CONF": 2, "max_split_size": 3,
	"garbage_collection_threshold": 4, "expandable_segments": 5,
	"pinned_num_register_threads": 6, "release_lock_on_cudamalloc": 7,
	"pinned_use_cuda_host_register": 8, "roundup_power2_divisions": 9,
	"graph_capture_record_stream_reuse": 10,
}

// settingKeys orders dict keys: PyTorch's settings first in PyTorch's
// order, then numbers by value (the roundup table's "1", "2", ...
// "32768"), then the rest as strings.
func settingKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		oa, ob := ptSettingOrder[a], ptSettingOrder[b]
		if oa != ob {
			if oa == 0 || ob == 0 {
				return oa != 0
			}
			return oa < ob
		}
		na, ea := strconv.ParseUint(a, 10, 64)
		nb, eb := strconv.ParseUint(b, 10, 64)
		switch {
		case ea == nil && eb == nil && na != nb:
			return na < nb
		case (ea == nil) != (eb == nil):
			return ea == nil
		}
		return a < b
	})
	return keys
}

// maxSettingDepth bounds the nesting of settings values (a Go map can
// contain itself).
const maxSettingDepth = 16

func (p *ptWriter) settings(m map[string]any) {
	for k, v := range m {
		if err := checkPTSetting(k, v); err != nil {
			p.fail("allocator_settings.%s: %v", k, err)
			return
		}
	}
	p.settingValue("allocator_settings", m, maxSettingDepth)
}

// checkPTSetting checks a known key's type, so that ReadPyTorch, which
// checks them, reads the file back.
func checkPTSetting(k string, v any) error {
	switch settingKinds[k] {
	case "str":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("want a string, got %T", v)
		}
	case "int":
		if _, ok := settingInt(v); !ok {
			return fmt.Errorf("want an int64, got %T", v)
		}
	case "float":
		switch v.(type) {
		case float64, float32:
		default:
			if _, ok := settingInt(v); !ok {
				return fmt.Errorf("want a float, got %T", v)
			}
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("want a bool, got %T", v)
		}
	case "dict":
		switch x := v.(type) {
		case map[string]int64, map[string]int:
		case map[string]any:
			for kk, vv := range x {
				if _, ok := settingInt(vv); !ok {
					return fmt.Errorf("%s: want an int64, got %T", kk, vv)
				}
			}
		default:
			return fmt.Errorf("want a dict of ints, got %T", v)
		}
	}
	return nil
}

// settingInt is v as an int64 when it is an integer that fits.
func settingInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x), true
		}
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

func (p *ptWriter) settingValue(path string, v any, depth int) {
	if p.err != nil {
		return
	}
	if depth < 0 {
		p.fail("%s: nested too deeply", path)
		return
	}
	if n, ok := settingInt(v); ok {
		p.int(n)
		return
	}
	switch x := v.(type) {
	case nil:
		p.op(opNONE)
	case bool:
		p.bool(x)
	case float64:
		p.float(x)
	case float32:
		p.float(float64(x))
	case string:
		p.str(x)
	case map[string]any:
		writePTDict(p, path, x, depth)
	case map[string]int64:
		writePTDict(p, path, x, depth)
	case map[string]int:
		writePTDict(p, path, x, depth)
	case uint64, uint:
		p.fail("%s: %d does not fit in int64", path, x)
	case []any:
		p.op(opEMPTY_LIST)
		b := p.batch(opAPPENDS)
		for i, e := range x {
			b.item()
			p.settingValue(fmt.Sprintf("%s[%d]", path, i), e, depth-1)
		}
		b.end()
	default:
		p.fail("%s: unsupported value type %T", path, v)
	}
}

func writePTDict[V any](p *ptWriter, path string, m map[string]V, depth int) {
	p.op(opEMPTY_DICT)
	b := p.batch(opSETITEMS)
	for _, k := range settingKeys(m) {
		b.item()
		p.str(k)
		p.settingValue(path+"."+k, m[k], depth-1)
	}
	b.end()
}

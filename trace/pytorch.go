package trace

// The PyTorch memory snapshot importer: torch.cuda.memory._dump_snapshot()
// pickles (section 5.2 of ../shared/docs/pytorch-caching-allocator.md) to
// a Trace, through the safe unpickler of pickle.go.
//
// Accepted shapes, oldest first:
//   - PyTorch 2.0 ("legacy"): blocks carry no address, frames or
//     requested_size but a history list of {addr, real_size, frames},
//     newest allocation first. A block's address is the segment's address
//     plus the sizes of the blocks before it, its stack and requested size
//     come from history[0], as torch/cuda/_memory_viz.py reads them.
//   - 2.1 and later: the dict {segments, device_traces, allocator_settings,
//     external_annotations, ...}; every key is optional, keys this code
//     does not know are ignored (newer PyTorch adds keys), known keys with
//     the wrong type are errors naming the key path.
//   - the bare list of segment dicts that torch.cuda.memory_snapshot()
//     returns.
//   - protocol 2 as torch::cuda::_memory_snapshot_pickled() (C++) writes
//     it: same dict, different opcodes, which the unpickler handles.
//
// Events: device_traces[d] is device d's chronological list. The events
// are device 0's list, then device 1's, and so on: PyTorch keeps one
// allocator per device, and the replayer runs one per device too, so only
// the order within a device matters (PyTorch records no cross-device
// order; time_us is the only hint). FormatError.Event is the index in that
// concatenation, and the message names device_traces[d][i].
//
// Errors found after decoding have Offset -1: the decoded values do not
// remember where in the file they were.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// PyTorchImporterVersion is the Tools["memreplay-importer"] value of an
// imported trace; bump it when the conversion changes meaning.
const PyTorchImporterVersion = "pytorch-snapshot/1"

// ReadPyTorchFile reads a snapshot pickle from a file.
func ReadPyTorchFile(path string) (*Trace, error) { return readPyTorchTrace(path, nil) }

// readPyTorchTrace is ReadPyTorchFile; a non-nil pipe is the input,
// already open (see readPyTorchPath), path only its name.
func readPyTorchTrace(path string, pipe io.Reader) (*Trace, error) {
	var sink *sliceSink
	err := readPyTorchPath(path, pipe, func() (*Trace, eventSink) {
		sink = &sliceSink{t: newPTTrace(path)}
		return sink.t, sink
	})
	if err != nil {
		return nil, err
	}
	sink.flatten()
	return sink.t, nil
}

// ReadPyTorchPacked reads a snapshot pickle from a file with its events
// packed: what Open does. Streamed (stream.go), it holds the file's
// strings, frames and stacks and about 8 bytes an event, not the file.
func ReadPyTorchPacked(path string) (*Packed, error) { return ReadPyTorchObserved(path, nil) }

// ReadPyTorchObserved is ReadPyTorchPacked that also gives every event to
// obs (if not nil), on another goroutine, while the import goes on. It
// returns once obs has seen them all.
func ReadPyTorchObserved(path string, obs EventObserver) (*Packed, error) {
	return readPyTorchPacked(path, nil, obs)
}

// readPyTorchPacked is ReadPyTorchObserved; a non-nil pipe is the
// input, already open (see readPyTorchPath), path only its name.
func readPyTorchPacked(path string, pipe io.Reader, obs EventObserver) (*Packed, error) {
	var t *Trace
	var pl *pipeLog
	err := readPyTorchPath(path, pipe, func() (*Trace, eventSink) {
		if pl != nil { // starting over
			pl.end(false)
			if obs != nil {
				obs.Restart()
			}
		}
		t, pl = newPTTrace(path), newPipeLog(obs)
		return t, pl
	})
	if pl != nil {
		pl.end(err == nil)
	}
	if err != nil {
		return nil, err
	}
	return &Packed{Header: t.Header, Stacks: t.Stacks, Events: pl.l, Annotations: t.Annotations, Final: t.Final, HasFinal: t.HasFinal}, nil
}

// ReadPyTorch reads a snapshot pickle. name is used in errors and as
// Header.SourceFile. Bad input gives a *FormatError.
func ReadPyTorch(r io.Reader, name string) (*Trace, error) {
	data, err := readInput(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var sink *sliceSink
	err = readPyTorchData(data, name, func() (*Trace, eventSink) {
		sink = &sliceSink{t: newPTTrace(name)}
		return sink.t, sink
	})
	if err != nil {
		return nil, err
	}
	sink.flatten()
	return sink.t, nil
}

// readPyTorchPath imports a file, streamed through a window; a snapshot
// not laid out for streaming is imported again whole (see stream.go).
// start is called for each attempt and returns where the result goes.
//
// A non-nil pipe is the input of a path that is not a regular file (a
// FIFO, /dev/stdin, bash's <(...)), already open, with the bytes Open
// read to tell the format still in it: opening such a path again would
// start after them, or wait for a writer that has gone. It is streamed
// as a file is, of unknown size (declared lengths are read as the bytes
// come), so that what is not a pickle fails at its first bad opcode, as
// a file does, where reading it whole first never ended on an endless
// pipe; its bytes are kept for the whole import a snapshot not laid out
// for streaming needs.
func readPyTorchPath(path string, pipe io.Reader, start func() (*Trace, eventSink)) error {
	var f *os.File
	var fi os.FileInfo
	if pipe == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			return err
		}
		defer f.Close()
		if fi, err = f.Stat(); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() { // a pipe: no size to check lengths against
			pipe = f
		}
	}
	if pipe != nil {
		var raw bytes.Buffer
		t, sink := start()
		err := importPyTorch(newFileUnpickler(io.TeeReader(pipe, &raw), -1, path), t, sink)
		if !errors.Is(err, errNotStreamed) {
			return err
		}
		if _, err := raw.ReadFrom(pipe); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		t, sink = start()
		return importPyTorch(newMemUnpickler(raw.Bytes(), path), t, sink)
	}
	t, sink := start()
	err := importPyTorch(newFileUnpickler(f, fi.Size(), path), t, sink)
	if !errors.Is(err, errNotStreamed) {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	t, sink = start()
	return importPyTorch(newMemUnpickler(data, path), t, sink)
}

// readPyTorchData imports an input in memory: streamed, as a file is,
// which frees the entries as they are converted, and whole when the
// snapshot is not laid out for streaming.
func readPyTorchData(data []byte, name string, start func() (*Trace, eventSink)) error {
	t, sink := start()
	err := importPyTorch(withStream(newMemUnpickler(data, name)), t, sink)
	if !errors.Is(err, errNotStreamed) {
		return err
	}
	t, sink = start()
	return importPyTorch(newMemUnpickler(data, name), t, sink)
}

// errNotStreamed: the snapshot must be imported again, whole.
var errNotStreamed = errors.New("snapshot not laid out for streaming")

func withStream(u *unpickler) *unpickler {
	u.st = &streamState{}
	return u
}

// importPyTorch decodes and converts one snapshot into t and sink. With
// u.st set (newFileUnpickler always streams) it streams the entries; any
// error once streaming began is errNotStreamed, so that the caller's
// whole import gives the error exactly as it always did.
func importPyTorch(u *unpickler, t *Trace, sink eventSink) error {
	if u.src != nil && u.st == nil {
		u.st = &streamState{}
	}
	c := newPTConv(&u.pickled, t, sink, u.size)
	if u.st != nil {
		u.st.c = c
		c.st = u.st
		if pl, ok := sink.(*pipeLog); ok {
			pl.off = &u.st.off
		}
	}
	root, err := u.run()
	if err != nil {
		var se *shapeError
		if errors.As(err, &se) {
			return errNotStreamed
		}
		return err
	}
	u.root = root
	if err := c.finish(root); err != nil {
		if c.st != nil && c.st.dt != 0 {
			return errNotStreamed
		}
		return err
	}
	return nil
}

func newPTTrace(name string) *Trace {
	return &Trace{
		Header: Header{
			Version:    FormatVersion,
			Source:     "pytorch-snapshot",
			SourceFile: name,
			Tools:      map[string]string{"memreplay-importer": PyTorchImporterVersion},
		},
		Stacks: NewStacks(),
	}
}

// eventSink receives the converted events in order.
type eventSink interface {
	// next returns a zeroed event to convert into; commit keeps it. A
	// conversion that fails does not commit, and ends the import: the
	// sink is then dropped.
	next() *Event
	commit()
	reserve(n int)
	// annotate gives the annotations (Trace.Annotations) whose Event the
	// sink sets once the events are all in (pytorch_annot.go); called at
	// most once, at the end, and only when there are some.
	annotate(ann []Annotation)
}

// sliceSink builds Trace.Events. A whole import knows the count and
// reserves it; a streamed one learns it only at the end, so its events are
// packed into an EventLog as they come (about 8 bytes an event, no
// pointers for the collector to scan) and flatten unpacks them once into
// a slice of the exact length. Growing one slice by append copied each
// event about twice more and left the copies to the collector (8% of the
// real-snapshot corpus); chunks of []Event doubling in size still
// allocated each event's 72 bytes twice, the first time in chunks the
// collector had to scan.
type sliceSink struct {
	t   *Trace
	log *EventLog    // the events after t.Events, packed; nil until one overflows
	e   Event        // the event next handed out, when it goes to log
	ann []Annotation // external_annotations to place in flatten
}

func (s *sliceSink) next() *Event {
	if s.log == nil && len(s.t.Events) < cap(s.t.Events) {
		s.t.Events = s.t.Events[:len(s.t.Events)+1]
		return &s.t.Events[len(s.t.Events)-1]
	}
	if s.log == nil {
		s.log = &EventLog{}
	}
	s.e = Event{}
	return &s.e
}

func (s *sliceSink) commit() {
	if s.log != nil {
		s.log.Append(&s.e)
	}
}

func (s *sliceSink) reserve(n int) {
	if s.t.Events == nil && s.log == nil {
		s.t.Events = make([]Event, 0, n)
	}
}

func (s *sliceSink) annotate(ann []Annotation) { s.ann = ann }

// flatten puts the packed events into t.Events, after those already
// there, and places the annotations.
func (s *sliceSink) flatten() {
	if s.log != nil {
		ev := make([]Event, int64(len(s.t.Events))+s.log.Len())
		copy(ev, s.t.Events)
		s.log.unpackInto(ev[len(s.t.Events):])
		s.t.Events, s.log = ev, nil
	}
	PlaceAnnotations(s.ann, s.t.Events)
	s.ann = nil
}

// readInput reads r whole. When r knows its size (bytes.Reader, a regular
// file) the buffer is allocated once: io.ReadAll's doubling copied and
// cleared a 100 MB snapshot several times over.
func readInput(r io.Reader) ([]byte, error) {
	size := int64(-1)
	switch x := r.(type) {
	case interface{ Len() int }:
		size = int64(x.Len())
	case interface{ Stat() (os.FileInfo, error) }:
		if fi, err := x.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	if size < 0 || size >= math.MaxInt32*8 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, size+1) // +1: the read that sees EOF needs room
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) { // it grew after the size was taken
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// ptConv is one conversion of a decoded snapshot.
type ptConv struct {
	p       *pickled
	t       *Trace
	sink    eventSink
	st      *streamState // non-nil while entries are streamed
	devices map[int32]bool
	// budget counts down the objects the conversion may still produce. A
	// pickle can reference one big object many times through the memo at
	// two bytes a reference, so a small file could expand into billions of
	// blocks or events; every object made from an unshared pickle object
	// costs at least a byte of input, so the input size is a safe bound.
	budget      int
	legacyNoted bool
	// words caches ptWord(string) by string index: pickles memoise their
	// strings, so a key or action name is one string index, and a lookup
	// here replaces comparing strings for every item of every entry.
	words []ptWord
	// stackKeys finds a frame list that another list object already
	// interned, keyed by its frame indices (real snapshots write a new list
	// for most entries but share the frame dicts), without building the
	// key Stacks.InternIndices builds; keyBuf is the scratch key.
	stackKeys map[string]StackID
	keyBuf    []byte
}

// ptWord names the strings the importer looks for: dict keys, actions and
// block states.
type ptWord uint8

const (
	wUnknown ptWord = iota
	// keys
	wAction
	wAddr
	wSize
	wStream
	wTimeUS
	wDeviceFree
	wFrames
	wDevice
	wAddress
	wTotalSize
	wSegmentType
	wSegmentPoolID
	wIsExpandable
	wBlocks
	wRequestedSize
	wState
	wHistory
	wFilename
	wLine
	wName
	wRealSize
	wSegments
	wDeviceTraces
	wAllocatorSettings
	wExternalAnnotations
	wStage
	// actions
	wAlloc
	wFreeRequested
	wFreeCompleted
	wSegmentAlloc
	wSegmentFree
	wSegmentMap
	wSegmentUnmap
	wOOM
	wSnapshot
	wUserDefined
	wAnnotate
	// block states
	wInactive
	wActiveAllocated
	wActivePendingFree
	wActiveAwaitingFree
	numPTWords
)

var ptWordOf = map[string]ptWord{
	"action": wAction, "addr": wAddr, "size": wSize, "stream": wStream,
	"time_us": wTimeUS, "device_free": wDeviceFree, "frames": wFrames,
	"device": wDevice, "address": wAddress, "total_size": wTotalSize,
	"segment_type": wSegmentType, "segment_pool_id": wSegmentPoolID,
	"is_expandable": wIsExpandable, "blocks": wBlocks,
	"requested_size": wRequestedSize, "state": wState, "history": wHistory,
	"filename": wFilename, "line": wLine, "name": wName,
	"real_size": wRealSize, "segments": wSegments,
	"device_traces": wDeviceTraces, "allocator_settings": wAllocatorSettings,
	"external_annotations": wExternalAnnotations, "stage": wStage,
	"alloc": wAlloc, "free_requested": wFreeRequested,
	"free_completed": wFreeCompleted, "segment_alloc": wSegmentAlloc,
	"segment_free": wSegmentFree, "segment_map": wSegmentMap,
	"segment_unmap": wSegmentUnmap, "oom": wOOM, "snapshot": wSnapshot,
	"user_defined": wUserDefined, "annotate": wAnnotate,
	"inactive": wInactive, "active_allocated": wActiveAllocated,
	"active_pending_free":  wActivePendingFree,
	"active_awaiting_free": wActiveAwaitingFree,
}

// actionOfWord maps trace entry action strings (spec 5.2). "snapshot",
// "user_defined" and "annotate" are markers.
var actionOfWord = [numPTWords]Action{
	wAlloc: ActionAlloc, wFreeRequested: ActionFreeRequested,
	wFreeCompleted: ActionFreeCompleted, wSegmentAlloc: ActionSegmentAlloc,
	wSegmentFree: ActionSegmentFree, wSegmentMap: ActionSegmentMap,
	wSegmentUnmap: ActionSegmentUnmap, wOOM: ActionOOM,
	wSnapshot: ActionMarker, wUserDefined: ActionMarker, wAnnotate: ActionMarker,
}

// word is ptWord of a str value, wUnknown for anything else.
func (c *ptConv) word(v pv) ptWord {
	if v.kind() != pkStr {
		return wUnknown
	}
	i := v.payload()
	if i >= uint64(len(c.words)) { // strings decoded since: streaming
		c.words = append(c.words, make([]ptWord, len(c.p.strs)-len(c.words))...)
	}
	if w := c.words[i]; w != 0 {
		return w - 1
	}
	w := ptWordOf[c.p.strs[i]]
	c.words[i] = w + 1
	return w
}

// convErr is a conversion error, its path built from the inside out.
type convErr struct {
	path  string
	msg   string
	event int64
}

func (e *convErr) in(prefix string) *convErr {
	e.path = prefix + e.path
	return e
}

func ptErrAt(path, format string, args ...any) *convErr {
	return &convErr{path: path, msg: fmt.Sprintf(format, args...), event: -1}
}

func ptTypeErr(path, want string, v pv) *convErr {
	return ptErrAt(path, "expected %s, got %s", want, v.typeName())
}

func convertPyTorch(p *pickled, name string, inputSize int) (*Trace, error) {
	sink := &sliceSink{t: newPTTrace(name)}
	if err := newPTConv(p, sink.t, sink, int64(inputSize)).finish(p.root); err != nil {
		return nil, err
	}
	sink.flatten()
	return sink.t, nil
}

func newPTConv(p *pickled, t *Trace, sink eventSink, inputSize int64) *ptConv {
	return &ptConv{
		p:         p,
		t:         t,
		sink:      sink,
		devices:   map[int32]bool{},
		budget:    int(min(inputSize, math.MaxInt/2)) + 64,
		words:     make([]ptWord, len(p.strs)),
		stackKeys: map[string]StackID{},
	}
}

// finish converts the decoded root (the entries already converted, when
// streamed) and completes the header.
func (c *ptConv) finish(root pv) error {
	name := c.t.Header.SourceFile
	if err := c.root(root); err != nil {
		msg := strings.TrimPrefix(err.path, ".")
		if msg == "" {
			msg = "top level"
		}
		return &FormatError{File: name, Offset: -1, Event: err.event, Msg: msg + ": " + err.msg}
	}
	ids := make([]int32, 0, len(c.devices))
	for d := range c.devices {
		ids = append(ids, d)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, d := range ids {
		c.t.Header.Devices = append(c.t.Header.Devices, Device{Index: d})
	}
	if len(c.t.Annotations) > 0 {
		c.sink.annotate(c.t.Annotations)
	}
	return nil
}

func (c *ptConv) note(format string, args ...any) {
	c.t.Header.Notes = append(c.t.Header.Notes, fmt.Sprintf(format, args...))
}

func (c *ptConv) spend(n int) *convErr {
	if n > c.budget {
		return ptErrAt("", "expands to more objects than its size allows (a pickle that references the same objects over and over)")
	}
	c.budget -= n
	return nil
}

func (c *ptConv) root(v pv) *convErr {
	switch v.kind() {
	case pkList:
		c.note("bare segment list (torch.cuda.memory_snapshot()): state only, no trace")
		if err := c.segments(v); err != nil {
			return err.in("segments")
		}
		return nil
	case pkDict:
		var segs, traces, settings, ann pv
		var haveSegs, haveTraces, haveSettings, haveAnn bool
		for _, it := range c.p.dict(v).items {
			switch c.word(it.key) {
			case wSegments:
				segs, haveSegs = it.val, true
			case wDeviceTraces:
				traces, haveTraces = it.val, true
			case wAllocatorSettings:
				settings, haveSettings = it.val, true
			case wExternalAnnotations:
				ann, haveAnn = it.val, true
			}
		}
		if haveSegs {
			if err := c.segments(segs); err != nil {
				return err.in(".segments")
			}
		}
		if c.st != nil && c.st.dt != 0 && (!haveTraces || traces != c.st.dt) {
			return ptErrAt(".device_traces", "not the list streamed")
		}
		if haveTraces {
			if err := c.traces(traces); err != nil {
				return err.in(".device_traces")
			}
		}
		if haveSettings {
			m, err := c.settings(settings)
			if err != nil {
				return err.in(".allocator_settings")
			}
			c.t.Header.AllocatorSettings = m
		}
		// record_function ranges, kept apart from the trace by PyTorch
		// since ≈2.6: beside the events (pytorch_annot.go).
		if haveAnn {
			if err := c.annotations(ann); err != nil {
				return err.in(".external_annotations")
			}
		}
		return nil
	}
	return ptTypeErr("", "dict or list", v)
}

// Typed field readers.

// wantBits reads an address or stream: PyTorch writes pointers and
// cudaStream_t as int64, so a negative value is the same 64 bits.
func (c *ptConv) wantBits(path string, v pv) (uint64, *convErr) {
	if v.kind() == pkInt { // the usual case, inlined
		return uint64(v.inlineInt()), nil
	}
	if b, ok := c.p.bits(v); ok {
		return b, nil
	}
	return 0, ptTypeErr(path, "int", v)
}

// wantSize reads a byte count, which cannot be negative.
func (c *ptConv) wantSize(path string, v pv) (uint64, *convErr) {
	if v.kind() == pkInt && v.inlineInt() >= 0 {
		return uint64(v.inlineInt()), nil
	}
	b, ok := c.p.bits(v)
	switch {
	case !ok:
		return 0, ptTypeErr(path, "int", v)
	case v.kind() != pkUint && int64(b) < 0:
		return 0, ptErrAt(path, "negative size %d", int64(b))
	}
	return b, nil
}

func (c *ptConv) wantInt(path string, v pv) (int64, *convErr) {
	n, ok, isUint := c.p.int(v)
	switch {
	case isUint:
		return 0, ptErrAt(path, "%d does not fit in int64", c.p.words[v.payload()])
	case !ok:
		return 0, ptTypeErr(path, "int", v)
	}
	return n, nil
}

func (c *ptConv) wantDevice(path string, v pv) (int32, *convErr) {
	n, err := c.wantInt(path, v)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, ptErrAt(path, "device %d out of range", n)
	}
	return int32(n), nil
}

func (c *ptConv) wantStr(path string, v pv) (string, *convErr) {
	if v.kind() != pkStr {
		return "", ptTypeErr(path, "str", v)
	}
	return c.p.str(v), nil
}

func (c *ptConv) wantBool(path string, v pv) (bool, *convErr) {
	if v.kind() != pkBool {
		return false, ptTypeErr(path, "bool", v)
	}
	return v.payload() != 0, nil
}

func (c *ptConv) wantList(path string, v pv) (*pyList, *convErr) {
	if v.kind() != pkList {
		return nil, ptTypeErr(path, "list", v)
	}
	l := c.p.list(v)
	if l.trace != 0 {
		return nil, ptErrAt(path, "a streamed trace list")
	}
	return l, nil
}

func (c *ptConv) wantDict(path string, v pv) (*pyDict, *convErr) {
	if v.kind() != pkDict {
		return nil, ptTypeErr(path, "dict", v)
	}
	return c.p.dict(v), nil
}

func (c *ptConv) traces(v pv) *convErr {
	if c.st != nil && c.st.dt != 0 {
		return c.streamedTraces()
	}
	l, err := c.wantList("", v)
	if err != nil {
		return err
	}
	total := 0
	for d, dv := range l.items {
		path := fmt.Sprintf("[%d]", d)
		if dv.kind() != pkList {
			return ptTypeErr(path, "list", dv)
		}
		if d > math.MaxInt32 {
			return ptErrAt(path, "device %d out of range", d)
		}
		dl, err := c.wantList(path, dv)
		if err != nil {
			return err
		}
		total += len(dl.items)
	}
	if err := c.spend(total); err != nil {
		return err
	}
	c.sink.reserve(total)
	n := 0
	for d, dv := range l.items {
		// Every device with a list existed for PyTorch (one list per
		// visible device), even if nothing happened on it.
		c.devices[int32(d)] = true
		for i, ev := range c.p.list(dv).items {
			if err := c.event(c.sink.next(), ev, int32(d)); err != nil {
				err.event = int64(n)
				return err.in(fmt.Sprintf("[%d][%d]", d, i))
			}
			c.sink.commit()
			n++
		}
	}
	return nil
}

// streamedTraces checks that device_traces is laid out as streaming
// assumed (stream.go): its items are the trace lists in the order they
// were made, holding the entries in the order they were converted.
func (c *ptConv) streamedTraces() *convErr {
	st := c.st
	if st.open || st.serials != st.appended {
		return ptErrAt("", "entries not appended to their lists")
	}
	var next int64
	for d, dv := range c.p.list(st.dt).items {
		if dv.kind() != pkList || c.p.list(dv).trace != uint32(d+1) {
			return ptErrAt(fmt.Sprintf("[%d]", d), "not the trace list streamed")
		}
		if run := st.traces[d]; run.n > 0 {
			if run.first != next {
				return ptErrAt(fmt.Sprintf("[%d]", d), "entries out of order")
			}
			next += run.n
		}
		c.devices[int32(d)] = true
	}
	if next != st.appended {
		return ptErrAt("", "entries outside device_traces")
	}
	c.sink.reserve(0) // an empty device_traces is an empty list, as in a whole import
	return nil
}

// Which keys an entry, a segment or a block had.
const (
	ptHasAction = 1 << iota
	ptHasAddr
	ptHasSize
	ptHasDevice
	ptHasTotal
	ptHasBlocks
	ptHasState
	ptHasRequested
	ptHasFrames
	ptHasHistory
)

func (c *ptConv) event(e *Event, v pv, dev int32) *convErr {
	d, err := c.wantDict("", v)
	if err != nil {
		return err
	}
	e.Device = dev
	var seen uint16
	var actionWord ptWord
	var frames pv
	for _, it := range d.items {
		var err *convErr
		switch c.word(it.key) {
		case wAction:
			actionWord = c.word(it.val)
			e.Action = actionOfWord[actionWord]
			if e.Action == ActionInvalid {
				if it.val.kind() == pkStr {
					return ptErrAt(".action", "unknown action %q", c.p.str(it.val))
				}
				return ptTypeErr(".action", "str", it.val)
			}
			seen |= ptHasAction
		case wAddr:
			e.Addr, err = c.wantBits(".addr", it.val)
			seen |= ptHasAddr
		case wSize:
			e.Size, err = c.wantSize(".size", it.val)
			seen |= ptHasSize
		case wStream:
			e.Stream, err = c.wantBits(".stream", it.val)
		case wTimeUS:
			e.TimeUS, err = c.wantInt(".time_us", it.val)
		case wDeviceFree:
			e.DeviceFree, err = c.wantSize(".device_free", it.val)
		case wFrames:
			frames = it.val
			seen |= ptHasFrames
		}
		if err != nil {
			return err
		}
	}
	if seen&ptHasAction == 0 {
		return ptErrAt("", "missing key \"action\"")
	}
	switch e.Action {
	case ActionOOM:
		if seen&ptHasSize == 0 {
			return ptErrAt("", "missing key \"size\"")
		}
	case ActionMarker:
	default:
		if seen&ptHasAddr == 0 {
			return ptErrAt("", "missing key \"addr\"")
		}
		if seen&ptHasSize == 0 {
			return ptErrAt("", "missing key \"size\"")
		}
	}
	if seen&ptHasFrames != 0 {
		id, err := c.stack(frames)
		if err != nil {
			return err.in(".frames")
		}
		e.Stack = id
	}
	if e.Action == ActionMarker {
		e.Label = ptMarkerLabels[actionWord]
		// ≈2.4's record_function annotations: the user's name is in the
		// first frame (UserDefinedLabel says which field; the stage stays
		// in Stack).
		if actionWord == wUserDefined {
			if idx := c.t.Stacks.FrameIndices(e.Stack); len(idx) > 0 {
				if n := UserDefinedLabel(c.t.Stacks.Frame(idx[0])); n != "" {
					e.Label = n
				}
			}
		}
	}
	return nil
}

var ptMarkerLabels = [numPTWords]string{wSnapshot: "snapshot", wUserDefined: "user_defined", wAnnotate: "annotate"}

// stack interns a frame list. The result is cached on the list and on
// each frame dict, so a list or frame the pickle shares through the memo
// is converted once.
func (c *ptConv) stack(v pv) (StackID, *convErr) {
	switch v.kind() {
	case pkNone:
		return 0, nil
	case pkStack: // converted while streaming
		return StackID(v.payload()), nil
	}
	l, err := c.wantList("", v)
	if err != nil {
		return 0, err
	}
	if l.tag != 0 {
		return StackID(l.tag - 1), nil
	}
	if len(l.items) == 0 {
		l.tag = 1
		return 0, nil
	}
	if err := c.spend(len(l.items)); err != nil {
		return 0, err
	}
	key := c.keyBuf[:0]
	for i, fv := range l.items {
		var f uint32
		switch fv.kind() {
		case pkFrame: // converted while streaming
			f = uint32(fv.payload())
		case pkDict:
			fd := c.p.dict(fv)
			if fd.tag == 0 {
				fr, err := c.frame(fd)
				if err != nil {
					return 0, err.in(fmt.Sprintf("[%d]", i))
				}
				fd.tag = c.t.Stacks.AddFrame(fr) + 1
			}
			f = fd.tag - 1
		default:
			return 0, ptTypeErr(fmt.Sprintf("[%d]", i), "dict", fv)
		}
		key = append(key, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
	}
	if cap(key) != cap(c.keyBuf) { // grown: keep the bigger buffer (storing it unchanged cost a write barrier)
		c.keyBuf = key
	}
	id, ok := c.stackKeys[string(key)]
	if !ok {
		idx := make([]uint32, len(l.items))
		for i := range idx {
			idx[i] = uint32(key[4*i]) | uint32(key[4*i+1])<<8 | uint32(key[4*i+2])<<16 | uint32(key[4*i+3])<<24
		}
		id = c.t.Stacks.InternIndices(idx)
		c.stackKeys[string(key)] = id
	}
	l.tag = uint32(id) + 1
	return id, nil
}

func (c *ptConv) frame(d *pyDict) (Frame, *convErr) {
	var f Frame
	for _, it := range d.items {
		var err *convErr
		switch c.word(it.key) {
		case wFilename:
			f.Filename, err = c.wantStr(".filename", it.val)
		case wName:
			f.Name, err = c.wantStr(".name", it.val)
		case wLine:
			f.Line, err = c.wantInt(".line", it.val)
		}
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

func (c *ptConv) segments(v pv) *convErr {
	l, err := c.wantList("", v)
	if err != nil {
		return err
	}
	if err := c.spend(len(l.items)); err != nil {
		return err
	}
	c.t.Final = make([]Segment, len(l.items))
	for i, sv := range l.items {
		if err := c.segment(&c.t.Final[i], sv); err != nil {
			return err.in(fmt.Sprintf("[%d]", i))
		}
		c.devices[c.t.Final[i].Device] = true
	}
	c.t.HasFinal = true
	return nil
}

func (c *ptConv) segment(s *Segment, v pv) *convErr {
	d, err := c.wantDict("", v)
	if err != nil {
		return err
	}
	var seen uint16
	var blocks pv
	for _, it := range d.items {
		var err *convErr
		switch c.word(it.key) {
		case wDevice:
			s.Device, err = c.wantDevice(".device", it.val)
			seen |= ptHasDevice
		case wAddress:
			s.Address, err = c.wantBits(".address", it.val)
			seen |= ptHasAddr
		case wTotalSize:
			s.TotalSize, err = c.wantSize(".total_size", it.val)
			seen |= ptHasTotal
		case wStream:
			s.Stream, err = c.wantBits(".stream", it.val)
		case wSegmentType:
			s.Pool, err = c.wantStr(".segment_type", it.val)
		case wSegmentPoolID:
			s.PoolID, err = c.poolID(".segment_pool_id", it.val)
		case wIsExpandable:
			s.Expandable, err = c.wantBool(".is_expandable", it.val)
		case wFrames:
			if s.Stack, err = c.stack(it.val); err != nil {
				err = err.in(".frames")
			}
		case wBlocks:
			blocks = it.val
			seen |= ptHasBlocks
		}
		if err != nil {
			return err
		}
	}
	for _, need := range [...]struct {
		bit  uint16
		name string
	}{{ptHasDevice, "device"}, {ptHasAddr, "address"}, {ptHasTotal, "total_size"}, {ptHasBlocks, "blocks"}} {
		if seen&need.bit == 0 {
			return ptErrAt("", "missing key %q", need.name)
		}
	}
	bl, err := c.wantList(".blocks", blocks)
	if err != nil {
		return err
	}
	if err := c.spend(len(bl.items)); err != nil {
		return err
	}
	s.Blocks = make([]Block, len(bl.items))
	next := s.Address
	for i, bv := range bl.items {
		b := &s.Blocks[i]
		if err := c.block(b, bv, next); err != nil {
			return err.in(fmt.Sprintf(".blocks[%d]", i))
		}
		next = b.Address + b.Size
	}
	return nil
}

func (c *ptConv) poolID(path string, v pv) ([2]int64, *convErr) {
	var id [2]int64
	if k := v.kind(); k != pkTuple && k != pkList {
		return id, ptTypeErr(path, "tuple", v)
	}
	if c.p.list(v).trace != 0 {
		return id, ptErrAt(path, "a streamed trace list")
	}
	items := c.p.list(v).items
	if len(items) != 2 {
		return id, ptErrAt(path, "expected 2 ints, got %d items", len(items))
	}
	for i := range id {
		var err *convErr
		if id[i], err = c.wantInt("", items[i]); err != nil {
			// The path only now: built for every segment, it was most of
			// the import's allocations on a snapshot of segments only.
			return id, err.in(fmt.Sprintf("%s[%d]", path, i))
		}
	}
	return id, nil
}

// block reads one block dict; addr is where the previous block ended, the
// address of a legacy block that has none.
func (c *ptConv) block(b *Block, v pv, addr uint64) *convErr {
	d, err := c.wantDict("", v)
	if err != nil {
		return err
	}
	var seen uint16
	var history pv
	b.Address = addr
	for _, it := range d.items {
		var err *convErr
		switch c.word(it.key) {
		case wAddress:
			b.Address, err = c.wantBits(".address", it.val)
			seen |= ptHasAddr
		case wSize:
			b.Size, err = c.wantSize(".size", it.val)
			seen |= ptHasSize
		case wRequestedSize:
			b.RequestedSize, err = c.wantSize(".requested_size", it.val)
			seen |= ptHasRequested
		case wState:
			switch c.word(it.val) {
			case wInactive:
				b.State = BlockInactive
			case wActiveAllocated:
				b.State = BlockAllocated
			case wActivePendingFree, wActiveAwaitingFree:
				b.State = BlockPendingFree
			default:
				if it.val.kind() == pkStr {
					return ptErrAt(".state", "unknown block state %q", c.p.str(it.val))
				}
				return ptTypeErr(".state", "str", it.val)
			}
			seen |= ptHasState
		case wFrames:
			if b.Stack, err = c.stack(it.val); err != nil {
				err = err.in(".frames")
			}
			seen |= ptHasFrames
		case wHistory:
			history = it.val
			seen |= ptHasHistory
		}
		if err != nil {
			return err
		}
	}
	if seen&ptHasSize == 0 {
		return ptErrAt("", "missing key \"size\"")
	}
	if seen&ptHasState == 0 {
		return ptErrAt("", "missing key \"state\"")
	}
	if seen&ptHasAddr == 0 && !c.legacyNoted {
		c.legacyNoted = true
		c.note("PyTorch 2.0 snapshot: block addresses computed from segment addresses and block sizes, block stacks taken from history[0]")
	}
	if seen&ptHasHistory != 0 {
		if err := c.history(b, history, seen); err != nil {
			return err.in(".history")
		}
	}
	return nil
}

// history applies a legacy block's newest history entry (history[0]:
// PyTorch 2.0 prepends each allocation, and merged blocks append the
// merged neighbour's chain after it) where the block lacks the newer keys.
func (c *ptConv) history(b *Block, v pv, seen uint16) *convErr {
	l, err := c.wantList("", v)
	if err != nil || len(l.items) == 0 {
		return err
	}
	h, err := c.wantDict("[0]", l.items[0])
	if err != nil {
		return err
	}
	if seen&ptHasRequested == 0 {
		if rs, ok := c.p.get(h, "real_size"); ok {
			if b.RequestedSize, err = c.wantSize("[0].real_size", rs); err != nil {
				return err
			}
		}
	}
	if seen&ptHasFrames == 0 {
		if fr, ok := c.p.get(h, "frames"); ok {
			if b.Stack, err = c.stack(fr); err != nil {
				return err.in("[0].frames")
			}
		}
	}
	return nil
}

// settingKinds are the types of the allocator_settings keys PyTorch
// writes (section 5.2).
var settingKinds = map[string]string{
	"PYTORCH_CUDA_ALLOC_CONF":           "str",
	"PYTORCH_ALLOC_CONF":                "str",
	"max_split_size":                    "int",
	"garbage_collection_threshold":      "float",
	"expandable_segments":               "bool",
	"pinned_num_register_threads":       "int",
	"release_lock_on_cudamalloc":        "bool",
	"pinned_use_cuda_host_register":     "bool",
	"graph_capture_record_stream_reuse": "bool",
	"roundup_power2_divisions":          "dict",
}

// settings converts allocator_settings to the Header's Go shape. Unknown
// keys whose values have no place in that shape (None, lists, ...) are
// left out with a note rather than refused: newer PyTorch adds keys.
func (c *ptConv) settings(v pv) (map[string]any, *convErr) {
	d, err := c.wantDict("", v)
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, len(d.items))
	for _, it := range d.items {
		if it.key.kind() != pkStr {
			c.note("allocator_settings: key of type %s skipped", it.key.typeName())
			continue
		}
		k := c.p.str(it.key)
		path := "." + k
		var val any
		var err *convErr
		switch settingKinds[k] {
		case "str":
			val, err = c.wantStr(path, it.val)
		case "int":
			val, err = c.wantInt(path, it.val)
		case "float":
			switch it.val.kind() {
			case pkFloat:
				val = c.p.float(it.val)
			case pkInt, pkWide:
				n, _, _ := c.p.int(it.val)
				val = float64(n)
			default:
				err = ptTypeErr(path, "float", it.val)
			}
		case "bool":
			val, err = c.wantBool(path, it.val)
		case "dict":
			rd, derr := c.wantDict(path, it.val)
			if derr != nil {
				return nil, derr
			}
			table := make(map[string]any, len(rd.items))
			for _, e := range rd.items {
				ks, err := c.wantStr(path+" key", e.key)
				if err != nil {
					return nil, err
				}
				if table[ks], err = c.wantInt(path+"."+ks, e.val); err != nil {
					return nil, err
				}
			}
			val = table
		default:
			g, ok := c.plainSetting(it.val, 4)
			if !ok {
				c.note("allocator_settings.%s of type %s skipped", k, it.val.typeName())
				continue
			}
			val = g
		}
		if err != nil {
			return nil, err
		}
		m[k] = val
	}
	return m, nil
}

// plainSetting converts an unknown setting whose value fits the Header's
// shape: bool, int64, float64, string, or dicts of those with string keys.
// Nested dicts can be shared, so each conversion spends from the budget.
func (c *ptConv) plainSetting(v pv, depth int) (any, bool) {
	switch v.kind() {
	case pkBool:
		return v.payload() != 0, true
	case pkInt, pkWide:
		n, _, _ := c.p.int(v)
		return n, true
	case pkFloat:
		return c.p.float(v), true
	case pkStr:
		return c.p.str(v), true
	case pkDict:
		x := c.p.dict(v)
		if depth == 0 || c.spend(len(x.items)) != nil {
			return nil, false
		}
		m := make(map[string]any, len(x.items))
		for _, it := range x.items {
			if it.key.kind() != pkStr {
				return nil, false
			}
			g, ok := c.plainSetting(it.val, depth-1)
			if !ok {
				return nil, false
			}
			m[c.p.str(it.key)] = g
		}
		return m, true
	}
	return nil, false
}

package trace

// Writing a PyTorch snapshot as the events happen: the spool.
//
// A snapshot pickle is one dict whose "segments" (the end state) come
// before "device_traces" (the entries), and the memo numbers every shared
// string and frame in file order, so no entry can be written before the
// end state is known. Writers that see the events one at a time (the
// recording of a replay, `convert` from a streamed trace) used to gather
// them in a Trace, 72 bytes an event plus the growth of the slice: 7 GB
// of memory for a 25-million-entry recording. A PyTorchSpool keeps them
// on disk instead, in a packed form, and writes the snapshot from there
// at the end with the same ptWriter as WritePyTorch, so the file is the
// one WritePyTorch writes for the same trace, byte for byte (the tests
// compare them).
//
// The spool file is created beside the output (the caller names the
// directory, so that it is on the output's file system and not in a /tmp
// that may be memory) and unlinked at once where the system allows it,
// so nothing is left behind if the process dies. Events are packed per
// device into blocks of about spoolBlock bytes; a block is written to
// the file when full, and its place is kept in an index (a few bytes per
// thousands of events). Writing the snapshot reads each device's blocks
// back in order. Memory is therefore one open block per device and the
// index, flat in the trace's length.
//
// The packed event (fields relative to the previous event of the same
// block, which starts from zeros):
//
//	byte  action (low 4 bits) | flags: 0x10 stack changed, 0x20 stream
//	      changed, 0x40 has a label, 0x80 has device_free
//	varint  addr - previous addr (zigzag, modulo 2^64)
//	uvarint size
//	varint  time_us - previous time_us (zigzag)
//	uvarint stack, if changed
//	uvarint stream, if changed
//	uvarint length + bytes: label, if any
//	uvarint device_free, if any
//
// A replay's alloc/free stream packs to about 8 to 12 bytes an event.
// Events PyTorch's trace has no entry for (empty_cache, stream_sync,
// record_stream) are counted, not stored.
//
// Add checks what WritePyTorch would refuse in an event (an invalid action
// or device, a size past int64, a stack not in the table) with the same
// messages, so errors come as the events arrive, not after the run.
//
// Packing and writing the blocks happen on a goroutine of their own (the
// packer), beside the replay that adds the events: they took a fifth of
// the replay's time when recording a 25-million-event replay, on the
// replay's goroutine. Add checks the event and copies it into a batch;
// a full batch goes to the packer, which owns the devices' blocks and
// the file until WriteSnapshot or Close wait for it to finish what it was
// given. An error of the file is the packer's: Add returns it once the
// batch after it is handed over, WriteSnapshot and Close at once.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
)

// spoolBlock is the size at which a device's open block goes to the file
// (a variable for the tests).
var spoolBlock = 256 << 10

// PyTorchSpool gathers a trace's events on disk for a PyTorch snapshot
// written once the end state is known; see the comment at the top of
// spool.go. Add the events in trace order, then WriteSnapshot; Close
// releases the file.
type PyTorchSpool struct {
	f      *os.File
	path   string // still to remove at Close ("" once removed)
	stacks *Stacks
	size   int64 // bytes in the file

	devs    []*spoolDev // by device ordinal; the packer's while it runs
	checked []bool      // by StackID: stacks found valid
	// later: the stacks are checked at WriteSnapshot (CheckStacksLater);
	// seen marks the stacks named so far, firstUse lists each at its
	// first event, in order.
	later    bool
	seen     []bool
	seenBig  map[StackID]bool
	firstUse []spoolStackUse
	events   int64 // every event added, left out ones included
	leftOut  int64
	hiDev    int32
	err      error
	closed   bool

	// The packer (see the file comment): batch collects the events
	// added, todo hands full batches over, free returns them; pending
	// counts the batches handed over and not yet packed.
	batch       []Event
	todo        chan []Event
	free        chan []Event
	pending     sync.WaitGroup
	packed      chan struct{} // closed when the packer ends
	mu          sync.Mutex
	perr        error // the packer's first error
	annotations int64 // external_annotations the last WriteSnapshot wrote
}

// spoolBatch is how many events go to the packer at a time, in one of
// spoolBatches batches that go round.
const spoolBatch, spoolBatches = 4096, 4

type spoolDev struct {
	blocks []spoolExtent // written blocks, in order
	open   []byte        // the block being filled
	n      int           // events in open
	prev   spoolState
}

type spoolExtent struct {
	off    int64
	len    int
	events int
}

// spoolState is what a packed event is relative to.
type spoolState struct {
	addr   uint64
	time   int64
	stack  StackID
	stream uint64
}

const (
	spoolStack      = 0x10
	spoolStream     = 0x20
	spoolLabel      = 0x40
	spoolDeviceFree = 0x80
)

// spoolStackUse is the first event (event) that names stack id.
type spoolStackUse struct {
	id    StackID
	event int64
}

// NewPyTorchSpool creates the spool file in dir (os.TempDir() when dir is
// empty). stacks is the table the events' stacks are in; it may grow while
// events are added.
func NewPyTorchSpool(dir string, stacks *Stacks) (*PyTorchSpool, error) {
	f, err := os.CreateTemp(dir, ".memreplay-spool-*")
	if err != nil {
		return nil, fmt.Errorf("trace: spooling the snapshot's entries: %w", err)
	}
	s := &PyTorchSpool{f: f, path: f.Name(), stacks: stacks}
	// Unlinked at once: the open file stays readable, and nothing is
	// left behind by a process that dies. (Where an open file cannot be
	// removed, Close removes it.)
	if os.Remove(f.Name()) == nil {
		s.path = ""
	}
	return s, nil
}

// CheckStacksLater makes the spool check the events' stacks against its
// table at WriteSnapshot rather than as they are added, for a table that
// is filled only after the events (a speculative replay's,
// trace.StacksComplete). Nothing reads the table before then; an event's
// stack not in it is then WriteSnapshot's error, in the words Add would
// have used, naming the first such event. Call it before the first Add.
func (s *PyTorchSpool) CheckStacksLater() { s.later = true }

// Events returns the number of events added, left out ones included.
func (s *PyTorchSpool) Events() int64 { return s.events }

// Annotations returns how many external_annotations the last
// WriteSnapshot wrote (t.Annotations; pytorch_annot.go).
func (s *PyTorchSpool) Annotations() int64 { return s.annotations }

// LeftOut returns the number of events added that PyTorch's trace has no
// entry for (empty_cache, stream_sync, record_stream): they are not
// written.
func (s *PyTorchSpool) LeftOut() int64 { return s.leftOut }

func (s *PyTorchSpool) fail(format string, args ...any) error {
	if s.err == nil {
		s.err = fmt.Errorf("trace: writing a PyTorch snapshot: "+format, args...)
	}
	return s.err
}

// Add appends e, the next event of the trace. It returns the first error
// of the spool: an event WritePyTorch would refuse, or the file's.
func (s *PyTorchSpool) Add(e *Event) error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return errors.New("trace: PyTorchSpool.Add after Close")
	}
	i := s.events
	if err := ptCheckDevice(ptWhere{"event", int(i), -1}, e.Device); err != nil {
		s.err = err
		return err
	}
	if e.Action == ActionInvalid || e.Action >= numActions {
		return s.fail("event %d: invalid action %s", i, e.Action)
	}
	s.events++
	s.hiDev = max(s.hiDev, e.Device)
	if ptLeftOut(e.Action) {
		s.leftOut++
		return nil
	}
	if e.Size > math.MaxInt64 {
		return s.fail("event %d size: %d bytes does not fit in int64", i, e.Size)
	}
	if e.Action == ActionOOM && e.DeviceFree > math.MaxInt64 {
		return s.fail("event %d device_free: %d bytes does not fit in int64", i, e.DeviceFree)
	}
	if e.Stack != 0 {
		if s.later {
			s.noteStack(i, e.Stack)
		} else if !s.stackOK(i, e.Stack) {
			return s.err
		}
	}
	if s.batch == nil {
		s.startPacker()
	}
	s.batch = append(s.batch, *e)
	if len(s.batch) == spoolBatch {
		s.handOver()
	}
	return s.err
}

// startPacker starts the packer and gives Add its first batch.
func (s *PyTorchSpool) startPacker() {
	s.todo = make(chan []Event, spoolBatches)
	s.free = make(chan []Event, spoolBatches)
	s.packed = make(chan struct{})
	s.batch = make([]Event, 0, spoolBatch)
	for range spoolBatches - 1 {
		s.free <- make([]Event, 0, spoolBatch)
	}
	go s.pack()
}

// handOver gives the batch to the packer, and takes up the packer's
// error, if any.
func (s *PyTorchSpool) handOver() {
	if len(s.batch) == 0 {
		return
	}
	s.pending.Add(1)
	s.todo <- s.batch
	// The batches go round: when the packer is behind, Add waits for
	// one rather than making garbage of the replay's size.
	s.batch = <-s.free
	s.takePackerError()
}

// sync waits until the packer has packed every event added: the devices'
// blocks and the file are then the caller's until the next handOver.
func (s *PyTorchSpool) sync() {
	if s.todo == nil {
		return
	}
	s.handOver()
	s.pending.Wait()
	s.takePackerError()
}

func (s *PyTorchSpool) takePackerError() {
	s.mu.Lock()
	err := s.perr
	s.mu.Unlock()
	if err != nil && s.err == nil {
		s.err = err
	}
}

// pack is the packer: it packs the batches handed over into the devices'
// open blocks and writes the full ones to the file.
func (s *PyTorchSpool) pack() {
	defer close(s.packed)
	for b := range s.todo {
		for k := range b {
			e := &b[k]
			for int(e.Device) >= len(s.devs) {
				s.devs = append(s.devs, nil)
			}
			d := s.devs[e.Device]
			if d == nil {
				d = &spoolDev{}
				s.devs[e.Device] = d
			}
			d.pack(e)
			if len(d.open) >= spoolBlock {
				if err := s.writeBlock(d); err != nil {
					s.mu.Lock()
					if s.perr == nil {
						s.perr = err
					}
					s.mu.Unlock()
				}
			}
		}
		clear(b) // the labels
		s.free <- b[:0]
		s.pending.Done()
	}
}

// stopPacker ends the packer once it has packed what it was given.
func (s *PyTorchSpool) stopPacker() {
	if s.todo == nil {
		return
	}
	s.sync()
	close(s.todo)
	<-s.packed
	s.todo = nil
}

// stackOK checks a stack the first time an event names it: in the table,
// and its frames too (the table only grows, so the check holds when the
// snapshot is written).
func (s *PyTorchSpool) stackOK(i int64, id StackID) bool {
	if int(id) < len(s.checked) && s.checked[id] {
		return true
	}
	if s.stacks == nil || int(id) >= s.stacks.NumStacks() {
		s.fail("event %d: stack %d is not in the stack table", i, id)
		return false
	}
	nf := s.stacks.NumFrames()
	for _, fi := range s.stacks.FrameIndices(id) {
		if int(fi) >= nf {
			s.fail("event %d: stack %d names frame %d, not in the table", i, id, fi)
			return false
		}
	}
	for int(id) >= len(s.checked) {
		s.checked = append(s.checked, false)
	}
	s.checked[id] = true
	return true
}

// noteStack notes event i's stack for the check at WriteSnapshot
// (CheckStacksLater), the first time it is named.
func (s *PyTorchSpool) noteStack(i int64, id StackID) {
	if id < spoolSeenMax {
		// Table IDs are dense: a flag each.
		if int(id) < len(s.seen) && s.seen[id] {
			return
		}
		for int(id) >= len(s.seen) {
			s.seen = append(s.seen, false)
		}
		s.seen[id] = true
	} else {
		if s.seenBig[id] {
			return
		}
		if s.seenBig == nil {
			s.seenBig = map[StackID]bool{}
		}
		s.seenBig[id] = true
	}
	s.firstUse = append(s.firstUse, spoolStackUse{id, i})
}

// spoolSeenMax bounds the stack IDs noteStack marks in a slice (those
// beyond, in a map).
const spoolSeenMax = 1 << 24

// pack appends e to the open block.
func (d *spoolDev) pack(e *Event) {
	flags := byte(e.Action)
	if e.Stack != d.prev.stack {
		flags |= spoolStack
	}
	if e.Stream != d.prev.stream {
		flags |= spoolStream
	}
	if e.Label != "" {
		flags |= spoolLabel
	}
	if e.DeviceFree != 0 {
		flags |= spoolDeviceFree
	}
	b := append(d.open, flags)
	b = binary.AppendVarint(b, int64(e.Addr-d.prev.addr))
	b = binary.AppendUvarint(b, e.Size)
	b = binary.AppendVarint(b, e.TimeUS-d.prev.time)
	if flags&spoolStack != 0 {
		b = binary.AppendUvarint(b, uint64(e.Stack))
	}
	if flags&spoolStream != 0 {
		b = binary.AppendUvarint(b, e.Stream)
	}
	if flags&spoolLabel != 0 {
		b = binary.AppendUvarint(b, uint64(len(e.Label)))
		b = append(b, e.Label...)
	}
	if flags&spoolDeviceFree != 0 {
		b = binary.AppendUvarint(b, e.DeviceFree)
	}
	d.open = b
	d.n++
	d.prev = spoolState{addr: e.Addr, time: e.TimeUS, stack: e.Stack, stream: e.Stream}
}

// writeBlock moves d's open block to the file (on the packer). After an
// error nothing more is written: the snapshot cannot be.
func (s *PyTorchSpool) writeBlock(d *spoolDev) error {
	if len(d.open) == 0 || s.size < 0 {
		return nil
	}
	if _, err := s.f.Write(d.open); err != nil {
		s.size = -1
		return fmt.Errorf("trace: writing a PyTorch snapshot: spooling the entries: %v", err)
	}
	d.blocks = append(d.blocks, spoolExtent{off: s.size, len: len(d.open), events: d.n})
	s.size += int64(len(d.open))
	d.open, d.n, d.prev = d.open[:0], 0, spoolState{}
	return nil
}

// unpack reads the events of one block into fn.
func unpackSpool(b []byte, fn func(e *Event)) error {
	var prev spoolState
	var e Event
	bad := errors.New("trace: the spool file is damaged")
	for len(b) > 0 {
		flags := b[0]
		b = b[1:]
		addr, n := binary.Varint(b)
		if n <= 0 {
			return bad
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 {
			return bad
		}
		b = b[n:]
		dt, n := binary.Varint(b)
		if n <= 0 {
			return bad
		}
		b = b[n:]
		e = Event{Action: Action(flags & 0x0f), Addr: prev.addr + uint64(addr), Size: size, TimeUS: prev.time + dt,
			Stack: prev.stack, Stream: prev.stream}
		if flags&spoolStack != 0 {
			v, n := binary.Uvarint(b)
			if n <= 0 || v > math.MaxUint32 {
				return bad
			}
			b = b[n:]
			e.Stack = StackID(v)
		}
		if flags&spoolStream != 0 {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return bad
			}
			b = b[n:]
			e.Stream = v
		}
		if flags&spoolLabel != 0 {
			v, n := binary.Uvarint(b)
			if n <= 0 || v > uint64(len(b)-n) {
				return bad
			}
			e.Label = string(b[n : n+int(v)])
			b = b[n+int(v):]
		}
		if flags&spoolDeviceFree != 0 {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return bad
			}
			b = b[n:]
			e.DeviceFree = v
		}
		prev = spoolState{addr: e.Addr, time: e.TimeUS, stack: e.Stack, stream: e.Stream}
		fn(&e)
	}
	return nil
}

// WriteSnapshot writes the snapshot of t with the spooled events: t is
// the trace less its events (t.Events must be empty), its Stacks the
// spool's table. The segments, device lists and settings follow
// WritePyTorch's rules (t.Initial is the end state when t has no Final
// and no event was added), and so do the bytes: WriteSnapshot writes what
// WritePyTorch writes for t with the events added. Nothing is written
// past the first error of w, which is returned. The spool can be written
// again.
func (s *PyTorchSpool) WriteSnapshot(w io.Writer, t *Trace) error {
	if t == nil {
		return errors.New("trace: PyTorchSpool.WriteSnapshot: nil trace")
	}
	if len(t.Events) > 0 {
		return errors.New("trace: PyTorchSpool.WriteSnapshot: the trace has events of its own")
	}
	if s.closed {
		return errors.New("trace: PyTorchSpool.WriteSnapshot after Close")
	}
	s.sync()
	if s.err != nil {
		return s.err
	}
	if s.later {
		for _, u := range s.firstUse {
			if !s.stackOK(u.event, u.id) {
				return s.err
			}
		}
		s.later, s.seen, s.seenBig, s.firstUse = false, nil, nil, nil
	}
	ndev, err := ptStateDeviceCount(t, s.hiDev)
	if err != nil {
		return err
	}
	pw := newPTWriter(w, s.stacks)
	var block []byte
	each := func(d int, b *batcher) {
		if d >= len(s.devs) || s.devs[d] == nil {
			return
		}
		dev := s.devs[d]
		// Add checked the events: i, the event's place in the device's
		// list, names one only for the file's own errors.
		i := 0
		emit := func(e *Event) {
			if pw.err == nil {
				e.Device = int32(d)
				pw.event(i, e, b)
				i++
			}
		}
		for _, x := range dev.blocks {
			if pw.err != nil {
				return
			}
			if cap(block) < x.len {
				block = make([]byte, x.len)
			}
			block = block[:x.len]
			if _, err := s.f.ReadAt(block, x.off); err != nil {
				pw.fail("reading the spooled entries back: %v", err)
				return
			}
			if err := unpackSpool(block, emit); err != nil {
				pw.fail("%v", err)
				return
			}
		}
		if err := unpackSpool(dev.open, emit); err != nil {
			pw.fail("%v", err)
		}
	}
	pw.async = newAsyncWriter(w, cap(pw.buf))
	err = pw.finish(pw.snapshot(t, s.events > 0, ndev, each))
	s.annotations = int64(len(t.Annotations))
	return err
}

// Close releases the spool file.
func (s *PyTorchSpool) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.stopPacker()
	err := s.f.Close()
	if s.path != "" {
		if rerr := os.Remove(s.path); err == nil {
			err = rerr
		}
	}
	s.devs = nil
	return err
}

// WriteSnapshotFile writes the snapshot to path as WritePyTorchFile does:
// through a temporary file and a rename, so a failure never leaves a
// truncated file under the name.
func (s *PyTorchSpool) WriteSnapshotFile(path string, t *Trace) error {
	return writeFileAtomic(path, func(w io.Writer) error { return s.WriteSnapshot(w, t) })
}

package trace

// EventLog stores events packed, for traces held whole that would be too
// big as []Event (72 bytes an event, the label's string header included): a snapshot of
// 25 million entries is 1.8 GB as []Event, about 8 bytes an event here.
//
// Each event is a header byte and varints. The header holds the action
// (low 4 bits) and which optional fields follow: a stack, device_free, a
// label, and whether device and stream are those of the previous event
// (they nearly always are). The address and time are zigzag deltas from
// the previous event's, sizes and the rest plain uvarints; labels are
// indices into a table of distinct labels (markers repeat a few names).
// Events never straddle chunks of the log, so a reader decodes from a
// slice without bounds to check mid-event, and appending never copies
// what was already written. Chunks start small and double up to 1 MiB:
// a log of a hundred events (most real snapshots have a few thousand) is
// not given a megabyte to clear, which was a fifth of the bytes the
// real-snapshot corpus allocated through `memreplay report`.

import (
	"encoding/binary"
	"io"
)

const (
	elStack      = 1 << 4
	elDeviceFree = 1 << 5
	elLabel      = 1 << 6
	elSameDevStr = 1 << 7

	elFirstChunk = 4 << 10
	elChunk      = 1 << 20
	// elMaxEvent bounds one event's bytes: the header and 8 varints.
	elMaxEvent = 1 + 8*binary.MaxVarintLen64
)

// EventLog is an append-only packed list of events. The zero value is
// empty and ready to use.
type EventLog struct {
	chunks   [][]byte
	n        int64
	labels   []string
	labelIdx map[string]uint64
	prev     elState
}

// elState is what deltas are taken from.
type elState struct {
	dev    int32
	stream uint64
	addr   uint64
	time   int64
}

// Len is the number of events.
func (l *EventLog) Len() int64 { return l.n }

// Bytes is the packed size.
func (l *EventLog) Bytes() int64 {
	var b int64
	for _, c := range l.chunks {
		b += int64(len(c))
	}
	return b
}

// Append adds e.
func (l *EventLog) Append(e *Event) {
	if len(l.chunks) == 0 || cap(l.chunks[len(l.chunks)-1])-len(l.chunks[len(l.chunks)-1]) < elMaxEvent {
		size := elFirstChunk
		if len(l.chunks) > 0 {
			size = min(2*cap(l.chunks[len(l.chunks)-1]), elChunk)
		}
		l.chunks = append(l.chunks, make([]byte, 0, size))
	}
	c := l.chunks[len(l.chunks)-1]
	h := byte(e.Action) & 0x0f
	if e.Stack != 0 {
		h |= elStack
	}
	if e.DeviceFree != 0 {
		h |= elDeviceFree
	}
	if e.Label != "" {
		h |= elLabel
	}
	p := &l.prev
	same := e.Device == p.dev && e.Stream == p.stream
	if same {
		h |= elSameDevStr
	}
	c = append(c, h)
	if !same {
		c = binary.AppendUvarint(c, uint64(uint32(e.Device)))
		c = binary.AppendUvarint(c, e.Stream)
	}
	c = binary.AppendVarint(c, int64(e.Addr-p.addr))
	c = binary.AppendUvarint(c, e.Size)
	c = binary.AppendVarint(c, e.TimeUS-p.time)
	if e.DeviceFree != 0 {
		c = binary.AppendUvarint(c, e.DeviceFree)
	}
	if e.Stack != 0 {
		c = binary.AppendUvarint(c, uint64(e.Stack))
	}
	if e.Label != "" {
		i, ok := l.labelIdx[e.Label]
		if !ok {
			if l.labelIdx == nil {
				l.labelIdx = map[string]uint64{}
			}
			i = uint64(len(l.labels))
			l.labels = append(l.labels, e.Label)
			l.labelIdx[e.Label] = i
		}
		c = binary.AppendUvarint(c, i)
	}
	// Only the length changed (the chunk had room for the event): storing
	// the slice whole would store its pointer too, through the collector's
	// write barrier while it marks.
	k := len(l.chunks) - 1
	l.chunks[k] = l.chunks[k][:len(c)]
	*p = elState{dev: e.Device, stream: e.Stream, addr: e.Addr, time: e.TimeUS}
	l.n++
}

// unpackInto decodes the log's events into dst, which holds Len() events:
// in place, without a Cursor's checks or a copy of each event.
func (l *EventLog) unpackInto(dst []Event) {
	var p elState
	i := 0
	for _, c := range l.chunks {
		for off := 0; off < len(c); i++ {
			off += decodeEvent(c[off:], &p, l.labels, &dst[i])
		}
	}
}

// Cursor reads the log from its first event; several may read at once.
func (l *EventLog) Cursor() *EventCursor { return &EventCursor{l: l} }

// EventCursor reads an EventLog in order.
type EventCursor struct {
	l     *EventLog
	chunk int
	off   int
	read  int64
	prev  elState
}

// Next fills e with the next event; it returns io.EOF after the last.
func (r *EventCursor) Next(e *Event) error {
	if r.read >= r.l.n {
		return io.EOF
	}
	c := r.l.chunks[r.chunk]
	if r.off >= len(c) {
		r.chunk++
		r.off = 0
		c = r.l.chunks[r.chunk]
	}
	r.off += decodeEvent(c[r.off:], &r.prev, r.l.labels, e)
	r.read++
	return nil
}

// decodeEvent decodes the event at the start of c, the previous one's
// state in p, and returns its length.
func decodeEvent(c []byte, p *elState, labels []string, e *Event) int {
	h := c[0]
	i := 1
	if h&elSameDevStr == 0 {
		d, n := binary.Uvarint(c[i:])
		i += n
		p.dev = int32(uint32(d))
		p.stream, n = binary.Uvarint(c[i:])
		i += n
	}
	da, n := binary.Varint(c[i:])
	i += n
	p.addr += uint64(da)
	size, n := binary.Uvarint(c[i:])
	i += n
	dt, n := binary.Varint(c[i:])
	i += n
	p.time += dt
	*e = Event{Action: Action(h & 0x0f), Device: p.dev, Addr: p.addr, Size: size, Stream: p.stream, TimeUS: p.time}
	if h&elDeviceFree != 0 {
		e.DeviceFree, n = binary.Uvarint(c[i:])
		i += n
	}
	if h&elStack != 0 {
		s, n := binary.Uvarint(c[i:])
		i += n
		e.Stack = StackID(s)
	}
	if h&elLabel != 0 {
		s, n := binary.Uvarint(c[i:])
		i += n
		e.Label = labels[s]
	}
	return i
}

// Packed is a whole trace with its events in an EventLog: what Open
// returns for a snapshot pickle, which is read at once but can be too big
// for a Trace's []Event. sim/replay's PreparePacked completes it as
// Prepare completes a Trace.
type Packed struct {
	Header               Header
	Stacks               *Stacks
	Initial              []Segment
	InitialReconstructed bool
	Events               *EventLog
	// Annotations are the trace's external_annotations, beside the
	// events (pytorch_annot.go; Trace.Annotations).
	Annotations []Annotation
	Final       []Segment
	HasFinal    bool
}

// NewReader streams the trace; several readers may read it at once. The
// reader sees Header and Initial as they are when it is called for them,
// so a PreparePacked after NewReader still shows.
func (p *Packed) NewReader() Reader { return &packedReader{p: p, cur: p.Events.Cursor()} }

// Trace copies the packed trace into a Trace with its events unpacked.
func (p *Packed) Trace() *Trace {
	t := &Trace{Header: p.Header, Stacks: p.Stacks, Initial: p.Initial, InitialReconstructed: p.InitialReconstructed,
		Annotations: p.Annotations, Final: p.Final, HasFinal: p.HasFinal, Events: make([]Event, 0, p.Events.Len())}
	cur := p.Events.Cursor()
	var e Event
	for cur.Next(&e) == nil {
		t.Events = append(t.Events, e)
	}
	return t
}

type packedReader struct {
	p   *Packed
	cur *EventCursor
}

func (r *packedReader) Header() Header  { return r.p.Header }
func (r *packedReader) Stacks() *Stacks { return r.p.Stacks }
func (r *packedReader) Initial() ([]Segment, bool) {
	return r.p.Initial, r.p.InitialReconstructed
}
func (r *packedReader) Next(e *Event) error { return r.cur.Next(e) }
func (r *packedReader) Final() ([]Segment, bool) {
	if r.cur.read < r.p.Events.Len() {
		return nil, false
	}
	return r.p.Final, r.p.HasFinal
}
func (r *packedReader) Close() error              { return nil }
func (r *packedReader) Annotations() []Annotation { return r.p.Annotations }

// EventObserver is given the events of a snapshot as it is imported
// (ReadPyTorchObserved, OpenWith), on a goroutine of its own: a second
// pass over the events (sim/replay's reconstruction) then runs beside the
// import instead of after it.
type EventObserver interface {
	// Event is called with each event and its index, in order.
	Event(i int64, e *Event)
	// Restart says the import started over (a snapshot not laid out for
	// streaming is imported again whole, see stream.go): forget the events
	// seen so far; they come again.
	Restart()
}

// ProgressObserver is an EventObserver that is also told where in the
// file the events came from, so that it can judge how many are still to
// come (sim/replay's speculative replay bounds the trace's length with
// it). Only a streamed import knows (stream.go); the whole one, which
// decodes the file before converting it, calls no Progress.
type ProgressObserver interface {
	EventObserver
	// Progress says that the first events events (those given so far)
	// were decoded from the file's bytes before offset: the rest of the
	// entries are in its bytes from offset on. It is called after each
	// batch of events, on the goroutine that calls Event.
	Progress(events, offset int64)
}

// pipeLog packs a snapshot's events on a goroutine of its own, beside
// the import: the importer hands them over in batches, the goroutine
// appends them to the EventLog and gives each to the observer, if any, so
// packing and the observer's pass cost the import (the longest part of
// opening a snapshot) nothing but the copy into a batch. The first batch
// is small and each new one twice the last, up to pipeBatch: a batch is
// 72 bytes an event, and a full one for a snapshot of a hundred events
// was a third of a megabyte to allocate and clear.
type pipeLog struct {
	l     *EventLog
	batch []Event
	ch    chan pipeChunk
	free  chan []Event
	done  chan struct{}
	// off, when set (a streamed import: stream.go), is where the last
	// converted entry ended in the file; it goes with each batch to a
	// ProgressObserver.
	off *int64
	obs EventObserver
	ann []Annotation // external_annotations to place in end
}

// pipeChunk is a batch of events and where its last entry ended (-1: not
// known).
type pipeChunk struct {
	evs []Event
	off int64
}

const pipeFirstBatch, pipeBatch = 256, 4096

func newPipeLog(obs EventObserver) *pipeLog {
	p := &pipeLog{l: &EventLog{}, ch: make(chan pipeChunk, 4), free: make(chan []Event, 6), done: make(chan struct{}), obs: obs}
	p.batch = make([]Event, 0, pipeFirstBatch)
	progress, _ := obs.(ProgressObserver)
	go func() {
		defer close(p.done)
		var i int64
		for pb := range p.ch {
			b := pb.evs
			for k := range b {
				p.l.Append(&b[k])
				if obs != nil {
					obs.Event(i, &b[k])
				}
				i++
			}
			if progress != nil && pb.off >= 0 {
				progress.Progress(i, pb.off)
			}
			select {
			case p.free <- b[:0]:
			default:
			}
		}
	}()
	return p
}

// handOver sends the batch with where its last entry ended.
func (p *pipeLog) handOver() {
	off := int64(-1)
	if p.off != nil {
		off = *p.off
	}
	p.ch <- pipeChunk{p.batch, off}
}

func (p *pipeLog) next() *Event {
	p.batch = p.batch[:len(p.batch)+1]
	e := &p.batch[len(p.batch)-1]
	*e = Event{}
	return e
}

// commit keeps the event next returned: a full batch is handed over.
// A batch back from the goroutine is reused only when it is as big as the
// next new one would be, so the batches keep growing to pipeBatch.
func (p *pipeLog) commit() {
	if len(p.batch) == cap(p.batch) {
		size := min(2*cap(p.batch), pipeBatch)
		p.handOver()
		select {
		case b := <-p.free:
			if cap(b) >= size {
				p.batch = b
				return
			}
		default:
		}
		p.batch = make([]Event, 0, size)
	}
}

func (p *pipeLog) reserve(int) {}

func (p *pipeLog) annotate(ann []Annotation) { p.ann = ann }

// end hands over what is left (when the import succeeded) and waits until
// every event is packed and observed. The annotations, known only now,
// are then placed: one read of the packed log's devices and times (the
// events and what the observer saw stay as they are).
func (p *pipeLog) end(ok bool) {
	if ok && len(p.batch) > 0 {
		p.handOver()
	}
	p.batch = nil
	close(p.ch)
	<-p.done
	if !ok || len(p.ann) == 0 {
		return
	}
	p.l.placeAnnotations(p.ann)
	p.ann = nil
}

// placeAnnotations sets the Event of ann (PlaceAnnotations) from the
// log's events, decoding only what the devices and times need.
func (l *EventLog) placeAnnotations(ann []Annotation) {
	pl := newAnnPlacer(ann)
	if pl == nil {
		return
	}
	var st elState
	for _, c := range l.chunks {
		for off := 0; off < len(c); {
			off += skimEvent(c[off:], &st)
			pl.push(st.dev, st.time)
		}
	}
	pl.end()
}

// skimEvent is decodeEvent for the device and time only: it moves p past
// the event at the start of c and returns its length.
func skimEvent(c []byte, p *elState) int {
	h := c[0]
	i := 1
	if h&elSameDevStr == 0 {
		d, n := binary.Uvarint(c[i:])
		i += n
		p.dev = int32(uint32(d))
		_, n = binary.Uvarint(c[i:])
		i += n
	}
	_, n := binary.Uvarint(c[i:]) // addr delta
	i += n
	_, n = binary.Uvarint(c[i:]) // size
	i += n
	dt, n := binary.Varint(c[i:])
	i += n
	p.time += dt
	for _, f := range [...]byte{elDeviceFree, elStack, elLabel} {
		if h&f != 0 {
			_, n = binary.Uvarint(c[i:])
			i += n
		}
	}
	return i
}

package trace

// Decoding a snapshot's packed events ahead of the replay.
//
// A snapshot pickle is imported whole into an EventLog (about 8 bytes an
// event), and the replay reads it back one event at a time: decoding the
// varints of 25 million events took 0.6 s of the replay's 3.4 s, on the
// replay's goroutine, while the machine's other core sat idle (the import
// that used it is over by then). aheadReader decodes them on a goroutine
// of its own, a few batches ahead, and hands out whole decoded batches:
// the replay's goroutine only copies events (it reads through NextBatch).
//
// The goroutine starts at the first read, not when the reader is made, so
// that the trace can still be prepared (sim/replay's PreparePacked sets
// Header and Initial) in between; like Packed's own reader, Header and
// Initial are read from the Packed when asked. Close stops the goroutine,
// wherever the consumer stopped (a replay that ends at an OOM reads no
// further). The events themselves never change once imported, so the
// goroutine reads the log without a lock.

import "io"

const (
	// aheadBatch events are decoded at a time (72 bytes each: 576 KiB).
	aheadBatch = 8192
	// aheadBatches go round: one being read, the others decoded ahead.
	aheadBatches = 3
)

type aheadReader struct {
	p       *Packed
	started bool
	full    chan []Event // decoded batches, in order; closed after the last
	free    chan []Event // batches read, to be filled again
	stop    chan struct{}
	done    chan struct{}
	cur     []Event // the batch being read
	off     int     // events of cur already handed out
	read    int64   // events handed out
	eof     bool
}

func newAheadReader(p *Packed) *aheadReader { return &aheadReader{p: p} }

func (r *aheadReader) start() {
	r.started = true
	r.full = make(chan []Event, aheadBatches-1)
	r.free = make(chan []Event, aheadBatches)
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	for range aheadBatches {
		r.free <- make([]Event, 0, aheadBatch)
	}
	go r.decode(r.p.Events.Cursor())
}

// decode fills batches until the log ends or Close stops it.
func (r *aheadReader) decode(cur *EventCursor) {
	defer close(r.done)
	defer close(r.full)
	for {
		var b []Event
		select {
		case b = <-r.free:
		case <-r.stop:
			return
		}
		b = b[:aheadBatch]
		n := 0
		for n < len(b) && cur.Next(&b[n]) == nil {
			n++
		}
		if n == 0 {
			return
		}
		select {
		case r.full <- b[:n]:
		case <-r.stop:
			return
		}
	}
}

// fill makes cur hold unread events; false at the end.
func (r *aheadReader) fill() bool {
	if r.off < len(r.cur) {
		return true
	}
	if r.eof {
		return false
	}
	if !r.started {
		r.start()
	}
	if r.cur != nil {
		r.free <- r.cur[:0]
		r.cur = nil
	}
	b, ok := <-r.full
	if !ok {
		r.eof = true
		return false
	}
	r.cur, r.off = b, 0
	return true
}

func (r *aheadReader) Next(e *Event) error {
	if !r.fill() {
		return io.EOF
	}
	*e = r.cur[r.off]
	r.off++
	r.read++
	return nil
}

// NextBatch implements BatchReader: the events of at most one decoded
// batch.
func (r *aheadReader) NextBatch(evs []Event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	if !r.fill() {
		return 0, io.EOF
	}
	n := copy(evs, r.cur[r.off:])
	r.off += n
	r.read += int64(n)
	return n, nil
}

func (r *aheadReader) Header() Header  { return r.p.Header }
func (r *aheadReader) Stacks() *Stacks { return r.p.Stacks }
func (r *aheadReader) Annotations() []Annotation {
	return r.p.Annotations
}
func (r *aheadReader) Initial() ([]Segment, bool) {
	return r.p.Initial, r.p.InitialReconstructed
}

// Final is the end state once every event was read.
func (r *aheadReader) Final() ([]Segment, bool) {
	if r.read < r.p.Events.Len() {
		return nil, false
	}
	return r.p.Final, r.p.HasFinal
}

// Close stops the decoding goroutine.
func (r *aheadReader) Close() error {
	if r.started && r.stop != nil {
		close(r.stop)
		<-r.done
		r.stop = nil
	}
	return nil
}

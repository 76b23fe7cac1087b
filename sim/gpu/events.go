package gpu

import "github.com/memreplay/memreplay/allocator"

// eventState holds a process's outstanding events.
//
// Event ids count up from 1 per process, so they are deterministic and their
// order is record order, which is stream order among events of one stream.
// A completed event stays until it is queried or synchronised, because the
// driver reports completion only when asked.
type eventState struct {
	events map[allocator.Event]*event
	last   allocator.Event
}

type event struct {
	stream allocator.Stream
	done   bool
}

func newEventState() eventState {
	return eventState{events: map[allocator.Event]*event{}}
}

// completeStream completes the events of s recorded up to and including
// upTo: a stream runs its work in order, so when one event has fired every
// earlier one on its stream has too.
func (s *eventState) completeStream(st allocator.Stream, upTo allocator.Event) {
	for id, e := range s.events {
		if e.stream == st && id <= upTo {
			e.done = true
		}
	}
}

func (s *eventState) completeAll() {
	for _, e := range s.events {
		e.done = true
	}
}

// RecordEvent is cudaEventRecord. The event is incomplete until the caller
// completes it or a synchronising call waits for it, unless the GPU was made
// with EventsCompleteImmediately.
func (p *Process) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	if err := p.end(CallEventRecord, p.begin(CallEventRecord)); err != nil {
		return 0, err
	}
	p.ev.last++
	p.ev.events[p.ev.last] = &event{stream: s, done: p.gpu.immediate}
	return p.ev.last, nil
}

// QueryEvent is cudaEventQuery. A completed event is forgotten, as the
// allocator releases it once it has seen it complete.
func (p *Process) QueryEvent(id allocator.Event) (bool, error) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	done, err := p.queryEvent(id)
	return done, p.end(CallEventQuery, err)
}

func (p *Process) queryEvent(id allocator.Event) (bool, error) {
	if err := p.begin(CallEventQuery); err != nil {
		return false, err
	}
	e, ok := p.ev.events[id]
	if !ok {
		return false, deviceError(CallEventQuery, errInvalidHandle, "event %d is not outstanding in process %d", id, p.id)
	}
	if e.done {
		delete(p.ev.events, id)
	}
	return e.done, nil
}

// SynchronizeEvent is cudaEventSynchronize: the event completes, with the
// events before it on its stream, and is forgotten.
func (p *Process) SynchronizeEvent(id allocator.Event) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallEventSync, p.synchronizeEvent(id))
}

func (p *Process) synchronizeEvent(id allocator.Event) error {
	if err := p.begin(CallEventSync); err != nil {
		return err
	}
	e, ok := p.ev.events[id]
	if !ok {
		return deviceError(CallEventSync, errInvalidHandle, "event %d is not outstanding in process %d", id, p.id)
	}
	p.ev.completeStream(e.stream, id)
	delete(p.ev.events, id)
	return nil
}

// SynchronizeStream is cudaStreamSynchronize: every event recorded on s so
// far completes.
func (p *Process) SynchronizeStream(s allocator.Stream) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	if err := p.end(CallStreamSync, p.begin(CallStreamSync)); err != nil {
		return err
	}
	p.ev.completeStream(s, p.ev.last)
	return nil
}

// CompleteEvents marks every event recorded on s so far as complete, as if
// the stream had caught up with them. It is the simulation's clock, not a
// device call: it is not counted and works on a corrupted context. On a
// closed process it does nothing.
func (p *Process) CompleteEvents(s allocator.Stream) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	p.ev.completeStream(s, p.ev.last)
}

// CompleteAllEvents marks every outstanding event complete.
func (p *Process) CompleteAllEvents() {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	p.ev.completeAll()
}

// CompleteEvent marks id and the events recorded before it on its stream
// complete. It reports false if id is not outstanding.
func (p *Process) CompleteEvent(id allocator.Event) bool {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	e, ok := p.ev.events[id]
	if ok {
		p.ev.completeStream(e.stream, id)
	}
	return ok
}

// PendingEvents returns how many recorded events are not yet complete.
func (p *Process) PendingEvents() int {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	n := 0
	for _, e := range p.ev.events {
		if !e.done {
			n++
		}
	}
	return n
}

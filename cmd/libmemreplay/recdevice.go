package main

import (
	"sync"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/cuda"
)

// recDevice is the device under a recording allocator: the cuda.Device,
// with the events of record_stream made replayable.
//
// When a block used on other streams (Tensor.record_stream) is freed, the
// allocator records one event per stream and returns the block to its
// pool once the events have completed, which the GPU decides. A replay
// must return it at the same point, so the trace has to say when each
// event was seen complete. It does so with memreplay's own entries: each
// record_stream gets a stream number of its own (synthStream), the
// allocator is told that number (it only passes streams of uses through to
// RecordEvent, so the choice changes none of its decisions), and this
// device translates it back to the real stream when it records the event;
// when a query at the start of a malloc finds the event complete, a
// stream_sync entry of that number goes into the trace, just before the
// free_completed entry it causes, so the replay completes exactly that
// event. An event the allocator waits for (empty_cache, the malloc's last
// resort) needs no entry: the replayed allocator waits for it at the same
// point by itself.
type recDevice struct {
	*cuda.Device
	rc *recorder // set once the recorder exists

	mu     sync.Mutex
	next   uint64                                // synthetic stream counter
	real   map[allocator.Stream]allocator.Stream // synthetic -> real stream
	events map[allocator.Event]allocator.Stream  // recorded event -> its synthetic stream
}

// synthStreamBase numbers the synthetic streams: far above any
// cudaStream_t (a pointer, or the special values 0, 1 and 2) and below
// the private streams of sim/replay (0xfffffff000000000 and up).
const synthStreamBase = allocator.Stream(0xfffe_0000_0000_0000)

func newRecDevice(g *cuda.Device) *recDevice {
	return &recDevice{Device: g, real: map[allocator.Stream]allocator.Stream{}, events: map[allocator.Event]allocator.Stream{}}
}

// synth returns a new synthetic stream standing for real.
func (v *recDevice) synth(real allocator.Stream) allocator.Stream {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next++
	s := synthStreamBase + allocator.Stream(v.next)
	v.real[s] = real
	return s
}

// drop forgets a synthetic stream whose block was freed without it (a
// record_stream that failed).
func (v *recDevice) drop(s allocator.Stream) {
	v.mu.Lock()
	delete(v.real, s)
	v.mu.Unlock()
}

// RecordEvent records the event on the real stream behind a synthetic one.
func (v *recDevice) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	v.mu.Lock()
	real, synthetic := v.real[s]
	if synthetic {
		delete(v.real, s)
	}
	v.mu.Unlock()
	if !synthetic {
		return v.Device.RecordEvent(s)
	}
	e, err := v.Device.RecordEvent(real)
	if err == nil {
		v.mu.Lock()
		v.events[e] = s
		v.mu.Unlock()
	}
	return e, err
}

// QueryEvent reports a completed event of a synthetic stream to the trace.
func (v *recDevice) QueryEvent(e allocator.Event) (bool, error) {
	done, err := v.Device.QueryEvent(e)
	if done && err == nil {
		if s, ok := v.take(e); ok && v.rc != nil {
			v.rc.r.StreamSync(s)
		}
	}
	return done, err
}

// SynchronizeEvent waits for the event; the replay waits at the same point.
func (v *recDevice) SynchronizeEvent(e allocator.Event) error {
	err := v.Device.SynchronizeEvent(e)
	v.take(e)
	return err
}

func (v *recDevice) take(e allocator.Event) (allocator.Stream, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.events[e]
	if ok {
		delete(v.events, e)
	}
	return s, ok
}

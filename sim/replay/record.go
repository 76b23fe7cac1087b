package replay

import (
	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// Recording turns an allocator's activity into trace events, the way
// PyTorch's _record_memory_history does: every alloc, free and decision as
// the allocator makes it, plus the inputs PyTorch leaves implicit
// (empty_cache, trial boundaries), each written after the decisions it
// caused. A replay of the recording with the same settings reproduces it
// decision for decision.
type Recording struct {
	a      *allocator.Allocator
	device int32
	emit   func(*trace.Event)
	remove func()
	stack  trace.StackID
	clock  func() int64
	// ev is the event observe passes on: one per recording, as emit
	// copies what it keeps, and an event made per entry escaped to the
	// heap (one allocation per allocator entry, a sixth of a recorded
	// replay's time in the garbage collector).
	ev trace.Event
}

// Record starts recording a's activity as events of device, passed to emit
// (under the allocator's lock: emit must not call the allocator). The event
// is valid during the call only: emit copies what it keeps. The
// record_stream and empty_cache calls are recorded whoever makes them
// (this Recording's methods or the allocator's): the allocator reports
// them to the observer under its lock, in their place among the entries.
func Record(a *allocator.Allocator, device int32, emit func(*trace.Event)) *Recording {
	r := &Recording{a: a, device: device, emit: emit}
	r.remove = a.AddObserverFor(allocator.AllActions|allocator.Requests, r.observe)
	return r
}

// SetStack sets the stack attached to the following alloc events (0: none).
func (r *Recording) SetStack(id trace.StackID) { r.stack = id }

// SetClock sets the source of event times in microseconds (default none).
func (r *Recording) SetClock(now func() int64) { r.clock = now }

var recordActions = [...]trace.Action{
	allocator.ActionAlloc:         trace.ActionAlloc,
	allocator.ActionFreeRequested: trace.ActionFreeRequested,
	allocator.ActionFreeCompleted: trace.ActionFreeCompleted,
	allocator.ActionSegmentAlloc:  trace.ActionSegmentAlloc,
	allocator.ActionSegmentFree:   trace.ActionSegmentFree,
	allocator.ActionSegmentMap:    trace.ActionSegmentMap,
	allocator.ActionSegmentUnmap:  trace.ActionSegmentUnmap,
	allocator.ActionOOM:           trace.ActionOOM,
	allocator.ActionRecordStream:  trace.ActionRecordStream,
	allocator.ActionEmptyCache:    trace.ActionEmptyCache,
}

func (r *Recording) observe(t allocator.TraceEntry) {
	r.ev = trace.Event{Device: r.device, Addr: t.Addr, Size: t.Size, Stream: uint64(t.Stream), DeviceFree: t.DeviceFree}
	e := &r.ev
	if int(t.Action) < len(recordActions) {
		e.Action = recordActions[t.Action]
	}
	if e.Action == trace.ActionAlloc {
		e.Stack = r.stack
	}
	r.send(e)
}

func (r *Recording) send(e *trace.Event) {
	if r.clock != nil {
		e.TimeUS = r.clock()
	}
	r.emit(e)
}

// EmptyCache calls the allocator's EmptyCache, which the recording records
// after the segment frees it caused.
func (r *Recording) EmptyCache() error { return r.a.EmptyCache() }

// RecordStream calls the allocator's RecordStream, which the recording
// records, so that a replay knows which stream a block's free waits for
// (PyTorch's traces do not say, and a replay of them must guess). The
// entry is written under the allocator's lock, so no other thread's entry
// can come between the call and its record.
func (r *Recording) RecordStream(b *allocator.Block, s allocator.Stream) error {
	return r.a.RecordStream(b, s)
}

// StreamSync records that every event pending on stream completed; the
// caller completes them on its device.
func (r *Recording) StreamSync(s allocator.Stream) {
	r.send(&trace.Event{Action: trace.ActionStreamSync, Device: r.device, Stream: uint64(s)})
}

// TrialStart, TrialEnd and Marker record annotations.
func (r *Recording) TrialStart(label string) {
	r.send(&trace.Event{Action: trace.ActionTrialStart, Device: r.device, Label: label})
}
func (r *Recording) TrialEnd(label string) {
	r.send(&trace.Event{Action: trace.ActionTrialEnd, Device: r.device, Label: label})
}
func (r *Recording) Marker(label string) {
	r.send(&trace.Event{Action: trace.ActionMarker, Device: r.device, Label: label})
}

// Stop ends the recording.
func (r *Recording) Stop() { r.remove() }

// SnapshotSegments converts an allocator snapshot to trace segments, for a
// trace's Final state.
func SnapshotSegments(s allocator.Snapshot) []trace.Segment {
	out := make([]trace.Segment, 0, len(s.Segments))
	for _, g := range s.Segments {
		seg := trace.Segment{Device: int32(g.Device), Address: g.Address, TotalSize: g.TotalSize, Stream: uint64(g.Stream),
			Pool: g.SegmentType, PoolID: g.PoolID, Expandable: g.IsExpandable}
		for _, b := range g.Blocks {
			st, _ := trace.ParseBlockState(b.State)
			seg.Blocks = append(seg.Blocks, trace.Block{Address: b.Address, Size: b.Size, RequestedSize: b.RequestedSize, State: st})
		}
		out = append(out, seg)
	}
	return out
}

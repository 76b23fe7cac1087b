package replay

import (
	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// Recorder watches a replay: the profiler implements it to measure where
// the bytes went. Its methods run on the replay's goroutine, outside the
// allocator's lock, so they may call the allocator's read-only methods
// (Snapshot, FreeSummary, Stats); an allocator observer (AddObserver),
// registered in Attach, sees each decision as it is made. ReplayRecorder
// (rerecord.go) records the replay as a trace; Recorders runs several.
type Recorder interface {
	// Attach is called once per device, before its first event, with the
	// allocator and the process (simulated or real) that will replay it.
	// Restored (reconstructed) blocks are reported through Alloc with index
	// -1 after Attach.
	Attach(device int32, a *allocator.Allocator, p Process)
	// Restored is called once per device after the reconstructed state
	// (if any) is in place and before the trace's first event: device
	// calls made until then belong to the restore, not to the trace.
	Restored(device int32)
	// Alloc reports a block handed out for the event at index, with the
	// recorded stack.
	Alloc(device int32, index int64, b *allocator.Block, stack trace.StackID)
	// Free reports a block about to be freed (the free request) for the
	// event at index; stack is the one recorded when it was allocated.
	Free(device int32, index int64, b *allocator.Block, stack trace.StackID)
	// OOM reports a malloc that failed (the replay's own OOM, whatever the
	// trace recorded).
	OOM(device int32, index int64, err *allocator.OutOfMemoryError)
	// Step is called after each event, with the event.
	Step(index int64, e *trace.Event)
}

// MarkerRecorder is an optional interface of a Recorder that wants the
// trace's markers (PyTorch's annotations and snapshots, memreplay's own):
// the replay calls Marker for each marker event it replays, in order,
// whether or not a Step is due there (the profiler puts them on its
// timeline). Markers change no decision.
type MarkerRecorder interface {
	Marker(device int32, index int64, e *trace.Event)
}

// AnnotationRecorder is an optional interface of a Recorder that wants
// the trace's annotations (trace.Annotation: PyTorch's
// external_annotations, beside the events). Run calls Annotations once,
// after the last event, when the reader has some (trace.AnnotationsOf);
// each annotation's Event says where among the events it falls. A replay
// that runs while the trace is imported (OpenReplay's speculation) reads
// a reader that has none: its caller hands them over itself.
type AnnotationRecorder interface {
	Annotations(ann []trace.Annotation)
}

// StepGate is an optional interface of a Recorder whose Step has work to
// do only at some events (the profiler: at its timeline's samples, and
// after an event that left it something to settle). The replay then calls
// Step only where it is due, and keeps what Step would otherwise have been
// told (the index and the latest time) in a Position the recorder reads:
// a call per event was most of the profiler's Step cost (issue 19).
type StepGate interface {
	// GateSteps is called once, before the first Attach. From then on the
	// replay keeps *pos up to date after each event it would report to
	// Step, and calls Step(index, e) only when index >= *due, reading *due
	// afresh before each call (a Step, a hook or an observer entry may
	// lower it; lowering it to -1 makes the next event's Step due).
	GateSteps(pos *Position) (due *int64)
}

// Position is where a replay with a StepGate recorder stands, as Step
// would have been told.
type Position struct {
	// Next is one past the index of the last event reported, or to be
	// reported, to Step (events of skipped devices are not).
	Next int64
	// TimeUS is the latest non-zero recorded time of those events.
	TimeUS int64
}

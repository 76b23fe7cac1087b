// Package trace is memreplay's model of a recorded allocation trace and the
// codecs that read and write it: the native format (native.go), PyTorch
// memory snapshot pickles (pytorch.go over the safe unpickler in pickle.go)
// and RMM logging_resource_adaptor CSV logs (rmm.go).
//
// A trace is a header, the allocator state at the first event (Initial: the
// segments and blocks that already existed, empty for a trace recorded from
// the start), a chronological list of events, PyTorch's record_function
// annotations beside them (Annotations: not events, each with the index
// of the event it comes before; pytorch_annot.go), and, when the recorder
// saved one, the state after the last event (Final). Stack frames are interned:
// an event names its stack by a StackID into the trace's Stacks table, so a
// frame list shared by a million events is stored once.
//
// Codecs never import the allocator: deciding what a recorded size rounds
// to, or rebuilding the state before a partial trace, belongs to sim/replay.
package trace

import (
	"fmt"
	"io"
)

// Action is the kind of an event. The first nine are PyTorch's trace entry
// actions with PyTorch's names; the rest are memreplay's own.
type Action uint8

const (
	ActionInvalid       Action = iota
	ActionAlloc                // a block handed out; Size is the caller's (unrounded) size
	ActionFreeRequested        // free called; Size is the block's requested size
	ActionFreeCompleted        // the block returned to its pool (after record_stream events)
	ActionSegmentAlloc         // cudaMalloc of a segment; Size is the segment's bytes
	ActionSegmentFree          // cudaFree of a segment
	ActionSegmentMap           // expandable-segment pages mapped at Addr
	ActionSegmentUnmap         // expandable-segment pages unmapped at Addr
	ActionOOM                  // a malloc failed; Size is the rounded request, DeviceFree the driver's free bytes
	ActionEmptyCache           // torch.cuda.empty_cache() (explicit in native traces; inferred elsewhere)
	ActionStreamSync           // every event pending on Stream completed (cudaStreamSynchronize)
	ActionTrialStart           // an HPO trial began; Label names it
	ActionTrialEnd             // that trial ended; Label names it
	ActionMarker               // a free-form annotation (PyTorch "snapshot", "user_defined", "annotate" entries; memreplay's own); Label
	ActionRecordStream         // the block at Addr was used on Stream (Tensor.record_stream); memreplay's recordings only
	numActions
)

var actionNames = [numActions]string{"invalid", "alloc", "free_requested", "free_completed",
	"segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
	"empty_cache", "stream_sync", "trial_start", "trial_end", "marker", "record_stream"}

func (a Action) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction maps a name from String back to its Action.
func ParseAction(s string) (Action, bool) {
	for i := ActionAlloc; i < numActions; i++ {
		if actionNames[i] == s {
			return i, true
		}
	}
	return ActionInvalid, false
}

// IsDecision reports whether the action is one the recording allocator
// decided (rather than its caller): the segment and OOM entries that
// `replay --check` compares.
func (a Action) IsDecision() bool {
	return a >= ActionSegmentAlloc && a <= ActionOOM
}

// Event is one trace entry. It is flat and fixed-size so that a reader can
// fill one in place per call; Label is set only for trials and markers.
type Event struct {
	Action     Action
	Device     int32   // device ordinal
	Addr       uint64  // block or segment address; 0 for oom and markers
	Size       uint64  // see Action for what it counts
	Stream     uint64  // raw cudaStream_t; 0 is the default stream
	TimeUS     int64   // microseconds since the epoch; 0 when not recorded
	DeviceFree uint64  // oom only
	Stack      StackID // 0: no stack recorded
	Label      string
}

// BlockState is a block's state in a snapshot, PyTorch's three states.
type BlockState uint8

const (
	BlockInactive    BlockState = iota // free (cached)
	BlockAllocated                     // "active_allocated"
	BlockPendingFree                   // "active_pending_free": freed, waiting for stream events
)

var blockStateNames = [...]string{"inactive", "active_allocated", "active_pending_free"}

func (s BlockState) String() string {
	if int(s) < len(blockStateNames) {
		return blockStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseBlockState maps PyTorch's state strings (and the docstring's
// "active_awaiting_free") to a BlockState.
func ParseBlockState(s string) (BlockState, bool) {
	switch s {
	case "inactive":
		return BlockInactive, true
	case "active_allocated":
		return BlockAllocated, true
	case "active_pending_free", "active_awaiting_free":
		return BlockPendingFree, true
	}
	return 0, false
}

// Segment is one segment dict of a snapshot: a cudaMalloc segment, or one
// mapped run of an expandable segment.
type Segment struct {
	Device     int32
	Address    uint64
	TotalSize  uint64
	Stream     uint64
	Pool       string   // "large" or "small" (PyTorch's segment_type)
	PoolID     [2]int64 // (0,0) for the default pools
	Expandable bool
	Stack      StackID // stack at segment creation
	Blocks     []Block // in address order, covering the segment
}

// Block is one block dict of a snapshot.
type Block struct {
	Address       uint64
	Size          uint64
	RequestedSize uint64 // stale for inactive blocks, as PyTorch reports it
	State         BlockState
	Stack         StackID
}

// Device describes one device of the recording.
type Device struct {
	Index    int32
	Name     string // e.g. "NVIDIA GeForce RTX 4090"; empty when unknown
	Capacity uint64 // total bytes; 0 when unknown
	// CapacitySource says where Capacity came from when it was not
	// recorded: e.g. "implied by the oom at event 1234" (sim/replay's
	// ImpliedCapacity). Empty for a recorded capacity.
	CapacitySource string
}

// Header is what a trace says about itself.
type Header struct {
	// Version is the native format version the trace was read from or will
	// be written as (FormatVersion for traces built in memory).
	Version int
	// Source names the recorder: "pytorch-snapshot", "rmm-log",
	// "memreplay", ...
	Source string
	// SourceFile is the file the trace was imported from, if any.
	SourceFile string
	Devices    []Device
	// AllocatorSettings is the recording allocator's configuration in the
	// shape of PyTorch's snapshot["allocator_settings"] (string keys, values
	// bool, int64, float64, string or map[string]any), nil when unknown.
	AllocatorSettings map[string]any
	// Tools maps tool names to versions ("memreplay", "torch", ...).
	Tools map[string]string
	// Notes are human-readable remarks attached by importers and the
	// reconstruction ("initial state reconstructed: ...").
	Notes []string
}

// Trace is a whole trace in memory. Readers that stream (Reader) never
// build one; importers of formats that cannot be streamed do. Open holds
// a snapshot pickle as a Packed instead (eventlog.go): the same trace with
// its events packed, for snapshots of tens of millions of events.
type Trace struct {
	Header  Header
	Stacks  *Stacks
	Initial []Segment // state at the first event; nil: an empty allocator
	// InitialReconstructed says Initial was inferred (sim/replay's
	// reconstruction), not recorded.
	InitialReconstructed bool
	Events               []Event
	// Annotations are PyTorch's external_annotations (record_function
	// ranges), in time order, beside the events: each says where among
	// them it falls (pytorch_annot.go). Nil for most traces.
	Annotations []Annotation
	Final       []Segment // state after the last event, when HasFinal
	HasFinal    bool
}

// Reader streams a trace: Header, Stacks and Initial are available at once,
// events one at a time, Final after Next has returned io.EOF.
type Reader interface {
	Header() Header
	// Stacks is the interning table; it grows as events are read, so a
	// StackID from an event is valid once Next has returned that event.
	Stacks() *Stacks
	Initial() (segments []Segment, reconstructed bool)
	// Next fills e with the next event. It returns io.EOF after the last
	// one, and a *FormatError for bad input.
	Next(e *Event) error
	// Final returns the state after the last event, once Next returned
	// io.EOF; ok is false when the trace has none.
	Final() (segments []Segment, ok bool)
	Close() error
}

// BatchReader is a Reader that can also hand out events many at a time.
// A replay that reads millions of events asks for them in batches: one
// call fills a reused slice, instead of an interface call per event.
type BatchReader interface {
	Reader
	// NextBatch fills evs[:n] with the next n events, 0 < n <= len(evs),
	// and returns n with a nil error; once no event is left it returns 0
	// and what Next would have returned (io.EOF, or a *FormatError for
	// bad input). An error met after some events is held back for the
	// next call, so every event before it is delivered first, exactly as
	// Next would. Next and NextBatch may be mixed.
	NextBatch(evs []Event) (n int, err error)
}

// AnnotationReader is a Reader that carries annotations beside its
// events (Trace.Annotations). They are complete once Next has returned
// io.EOF; before that, only when AnnotationsComplete says so (a native
// file may keep them after its events, and Annotations then returns nil).
type AnnotationReader interface {
	Annotations() []Annotation
}

// AnnotationsOf returns r's annotations, nil when it has none or is not
// an AnnotationReader.
func AnnotationsOf(r Reader) []Annotation {
	if ar, ok := r.(AnnotationReader); ok {
		return ar.Annotations()
	}
	return nil
}

// AnnotationsComplete says whether r's annotations (AnnotationsOf) are
// complete before its events are read: true for every reader but one
// that says they come later (LaterReader): a native file's not yet read
// to its end, which keeps them after its events, or a speculative
// replay's (sim/replay/speculate), which has them once the import is
// over.
func AnnotationsComplete(r Reader) bool {
	if l, ok := r.(LaterReader); ok {
		return !l.AnnotationsLater()
	}
	return true
}

// LaterReader is a Reader that may learn part of what it describes only
// after its events were read.
type LaterReader interface {
	// AnnotationsLater says the annotations (AnnotationsOf) are not
	// complete yet.
	AnnotationsLater() bool
	// StacksLater says the stack table (Stacks) may not yet hold the
	// stacks the events name: a speculative replay's, whose table is
	// filled once the import is over, before anything reads its frames.
	StacksLater() bool
}

// StacksComplete says whether r's stack table holds every stack its
// events name as they are read: true for every reader but one that says
// otherwise (LaterReader).
func StacksComplete(r Reader) bool {
	if l, ok := r.(LaterReader); ok {
		return !l.StacksLater()
	}
	return true
}

// NewReader streams an in-memory trace.
func (t *Trace) NewReader() Reader { return &sliceReader{t: t} }

// NextBatch copies the next events.
func (r *sliceReader) NextBatch(evs []Event) (int, error) {
	if r.i >= len(r.t.Events) {
		return 0, io.EOF
	}
	n := copy(evs, r.t.Events[r.i:])
	r.i += n
	return n, nil
}

type sliceReader struct {
	t *Trace
	i int
}

func (r *sliceReader) Header() Header  { return r.t.Header }
func (r *sliceReader) Stacks() *Stacks { return r.t.Stacks }
func (r *sliceReader) Initial() ([]Segment, bool) {
	return r.t.Initial, r.t.InitialReconstructed
}
func (r *sliceReader) Next(e *Event) error {
	if r.i >= len(r.t.Events) {
		return io.EOF
	}
	*e = r.t.Events[r.i]
	r.i++
	return nil
}
func (r *sliceReader) Final() ([]Segment, bool) {
	if r.i < len(r.t.Events) {
		return nil, false
	}
	return r.t.Final, r.t.HasFinal
}
func (r *sliceReader) Close() error              { return nil }
func (r *sliceReader) Annotations() []Annotation { return r.t.Annotations }

// ReadAll drains a reader into a Trace.
func ReadAll(r Reader) (*Trace, error) {
	init, rec := r.Initial()
	t := &Trace{Header: r.Header(), Stacks: r.Stacks(), Initial: init, InitialReconstructed: rec}
	for {
		var e Event
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		t.Events = append(t.Events, e)
	}
	t.Final, t.HasFinal = r.Final()
	t.Annotations = AnnotationsOf(r)
	return t, nil
}

// FormatError is bad input: it names the file and either the byte offset
// or the event index where reading stopped.
type FormatError struct {
	File   string // "" when reading from an unnamed stream
	Offset int64  // byte offset, or -1
	Event  int64  // event index (0-based), or -1
	Msg    string
	Err    error // underlying cause, if any
}

func (e *FormatError) Error() string {
	s := e.File
	if s == "" {
		s = "<input>"
	}
	if e.Event >= 0 {
		s += fmt.Sprintf(": event %d", e.Event)
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(": byte offset %d", e.Offset)
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

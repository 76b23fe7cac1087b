package allocator

// Action is the kind of a trace entry, with PyTorch's names.
type Action uint8

// The actions PyTorch's allocator records (TraceEntry::Action).
const (
	ActionAlloc         Action = iota // a block handed out; Size is the caller's size
	ActionFreeRequested               // Free called; Size is the block's requested size
	ActionFreeCompleted               // the block returned to its pool
	ActionSegmentAlloc                // cudaMalloc of a segment
	ActionSegmentFree                 // cudaFree of a segment
	ActionSegmentMap                  // expandable pages mapped
	ActionSegmentUnmap                // expandable pages unmapped
	ActionOOM                         // malloc failed; Size is the rounded size
)

var actionNames = [...]string{"alloc", "free_requested", "free_completed", "segment_alloc",
	"segment_free", "segment_map", "segment_unmap", "oom"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// TraceEntry is one allocator decision, as PyTorch's trace records it.
type TraceEntry struct {
	Action     Action
	Addr       uint64 // block or segment address; 0 for oom
	Size       uint64
	Stream     Stream
	DeviceFree uint64 // oom only: the device's free bytes
}

// Observer receives trace entries. It runs under the allocator's lock, so it
// must not call back into the allocator, and it should be quick.
type Observer func(TraceEntry)

// AddObserver registers an observer and returns the function that removes
// it. With no observer registered, recording costs one length check.
func (a *Allocator) AddObserver(o Observer) (remove func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextObserverID++
	id := a.nextObserverID
	a.observers = append(a.observers, observerEntry{id, o})
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, e := range a.observers {
			if e.id == id {
				a.observers = append(a.observers[:i:i], a.observers[i+1:]...)
				return
			}
		}
	}
}

type observerEntry struct {
	id int
	fn Observer
}

// record is small enough to inline, so that with no observer a trace point
// costs one length check.
func (a *Allocator) record(action Action, addr, size uint64, stream Stream) {
	if len(a.observers) != 0 {
		a.emit(TraceEntry{Action: action, Addr: addr, Size: size, Stream: stream})
	}
}

//go:noinline
func (a *Allocator) emit(e TraceEntry) {
	for _, o := range a.observers {
		o.fn(e)
	}
}

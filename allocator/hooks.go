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

	// The caller's requests that change no block's place but that a
	// recording must put among the entries in the order the allocator
	// served them: PyTorch's trace has no entry for either. They come
	// after the entries of what they caused (an empty_cache after its
	// segment frees), under the allocator's lock like every entry, so no
	// other thread's entry can come between. Only observers that ask for
	// them (Requests) see them.
	ActionRecordStream // RecordStream of a live block: Addr is the block's, Stream the stream it is used on
	ActionEmptyCache   // EmptyCache done
)

var actionNames = [...]string{"alloc", "free_requested", "free_completed", "segment_alloc",
	"segment_free", "segment_map", "segment_unmap", "oom", "record_stream", "empty_cache"}

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

// ActionSet is a set of actions, one bit each.
type ActionSet uint16

// Actions returns the set of the given actions.
func Actions(as ...Action) ActionSet {
	var s ActionSet
	for _, a := range as {
		s |= 1 << a
	}
	return s
}

// Has says whether a is in the set.
func (s ActionSet) Has(a Action) bool { return s&(1<<a) != 0 }

// AllActions holds every action PyTorch's trace has an entry for;
// Decisions those that are the allocator's own decisions rather than the
// caller's requests: the device calls and the out-of-memory. Requests are
// the calls PyTorch's trace leaves out (record_stream, empty_cache), which
// a recording that a replay must follow needs in their place.
var (
	AllActions = ActionSet(1<<(ActionOOM+1) - 1)
	Decisions  = Actions(ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap, ActionOOM)
	Requests   = Actions(ActionRecordStream, ActionEmptyCache)
)

// AddObserver registers an observer of every action in AllActions and returns the
// function that removes it. With no observer registered, recording costs
// one test.
func (a *Allocator) AddObserver(o Observer) (remove func()) {
	return a.AddObserverFor(AllActions, o)
}

// AddObserverFor registers an observer of the actions in set only. An
// allocation and a free make three entries (alloc, free_requested,
// free_completed) and no decision in the usual case: an observer of
// Decisions is not called for them at all.
func (a *Allocator) AddObserverFor(set ActionSet, o Observer) (remove func()) {
	if a.lock() {
		defer a.mu.Unlock()
	}
	a.nextObserverID++
	id := a.nextObserverID
	a.observers = append(a.observers, observerEntry{id, set, o})
	a.observed |= set
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, e := range a.observers {
			if e.id == id {
				a.observers = append(a.observers[:i:i], a.observers[i+1:]...)
				a.observed = 0
				for _, e := range a.observers {
					a.observed |= e.set
				}
				return
			}
		}
	}
}

type observerEntry struct {
	id  int
	set ActionSet
	fn  Observer
}

// record is small enough to inline, so that a trace point no observer
// wants costs one test. It passes the entry's fields, not the entry: the
// composite literal put it over the inlining budget, and a malloc+free
// pair made three calls to find nobody listening.
func (a *Allocator) record(action Action, addr, size uint64, stream Stream) {
	if a.observed.Has(action) {
		a.emitFields(action, addr, size, stream)
	}
}

//go:noinline
func (a *Allocator) emitFields(action Action, addr, size uint64, stream Stream) {
	a.emit(TraceEntry{Action: action, Addr: addr, Size: size, Stream: stream})
}

//go:noinline
func (a *Allocator) emit(e TraceEntry) {
	for _, o := range a.observers {
		if o.set.Has(e.Action) {
			o.fn(e)
		}
	}
}

// Package speculate replays a snapshot pickle while it is imported, on
// the guess that it was recorded from its start with PyTorch's default
// settings, and keeps that replay when the import confirms the guess.
package speculate

// Replaying a snapshot while it is imported: the speculative replay.
//
// Opening a 1 GB snapshot (25 million entries) takes about 4 s, most of
// it decoding the pickle on one core; replaying its events takes about
// 3 s more, and could only start once the import was over, because the
// replay starts from the state before the first event, which the
// reconstruction derives from every event and the end state (and the
// header's allocator settings, device capacities implied by oom entries,
// come at the end of the file or of the import too). On two cores the
// replay can instead run beside the import, on the guess that the trace
// was recorded from the start:
//
//   - the events reach the speculative replay as the import makes them
//     (an EventObserver beside the reconstruction's walk,
//     replay.OpenPreparedWalk),
//     in batches; the import is held back only when the replay falls a
//     long way behind (specMaxBuffered);
//   - it starts at once. The profiler spaces its timeline by the number
//     of events, which the import knows only at its end; until then the
//     replay is given bounds on it (EventBounds, profiler.LengthBounds),
//     and the profiler samples wherever a length within them would
//     (profiler/length.go), keeping, once the length is known, exactly
//     the samples that length's timeline takes. The bounds come from
//     where in the file the entries imported so far ended
//     (trace.ProgressObserver): the bytes left, at the bytes an entry
//     took over the last half of the entries so far, give the entries
//     left, within a margin that narrows as the entries grow in number
//     and widens when the recent entries' size drifts from the average's
//     (estimateLength). Bounds only narrow; when they cross, or hold
//     only a range too wide to be worth its samples, the guess is given
//     up. When the import is over, its count must be within them: it is
//     then the replay's length (the bounds meet);
//   - it replays from an empty allocator, under the header it guesses
//     (guessHeader: the default allocator settings, no device named) and
//     with the end state, once the import has it, at the end.
//
// When the import and the preparation are over, the guess is checked
// (confirmed): nothing reconstructed, the count within the bounds, the
// allocator settings meaning the same configuration, no capacity implied,
// every device the header names replayed. Then the speculative replay is
// the replay, decision for decision and sample for sample, since its
// inputs were the same. Else (settings other than the defaults, found at
// the end of the file) its result is discarded and the trace replayed
// again from what was imported, as without speculation; only time was
// lost. A trace that begins mid-run is found out sooner: the feed gives
// the guess up as soon as the reconstruction's walk meets a block or
// segment from before the trace, or an oom, at its first free of an older
// block as a rule. The stack table the replay's recorders were given
// becomes the trace's once the import is over: the import's table is
// copied into it (OpenReplay), since the recorders read it only after the
// replay; so do the import's annotations (the reader says both come later,
// trace.LaterReader). A recording of the replay as a pickle (replay
// --record OUT.pickle) is such a recorder: it spools its events beside the
// import, checks their stacks and places the annotations when it writes
// the file, after OpenReplay, for the replay kept; the caller drops a
// discarded one's.
//
// The cost: the hand-over, and the profiler's samples that its timeline
// does not keep (about 2.3% of the events of the 1 GB snapshot of
// docs/performance.md, each a read of the free sets' totals and a copy),
// which a machine with a free second core does not feel. Until issue 19's
// last round the replay waited for a second pass over the file that
// counted its entries (trace.CountPyTorchEntries, about 1 s of CPU for
// 1 GB): that wait, and that pass, are gone.

import (
	"errors"
	"io"
	"os"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// MinBytes is the size from which a snapshot is replayed while
// it is imported: below it the import is short, and a guess found wrong
// at the end (other settings) would cost a replay more than the overlap
// saves (a variable for the tests).
var MinBytes int64 = 64 << 20

// MinProcs is the parallelism (GOMAXPROCS) from which OpenReplay
// speculates: on one core the speculative replay only takes turns with
// the import, and adds the hand-over (a variable for the tests).
var MinProcs = 2

// Outcome says how OpenReplay replayed a trace.
type Outcome int

const (
	// NotSpeculated: replayed after the import (not a snapshot pickle,
	// or a small one).
	NotSpeculated Outcome = iota
	// Confirmed: the replay beside the import was the replay.
	Confirmed
	// Discarded: the replay beside the import guessed wrong (found
	// during the import, or once it was over); the trace was replayed
	// again after the import.
	Discarded
)

// ReplayFunc replays r, a trace of events events (0 when unknown), and
// returns the result and whatever else the caller keeps of the run (its
// recorders). OpenReplay may call it twice, the first time on another
// goroutine, with events 0 and bounds on the number of events that narrow
// while it runs (for profiler.Options.EventBounds; nil otherwise); what it
// keeps must not read r.Stacks() until OpenReplay has returned: r says so
// (trace.StacksComplete is false), and its annotations are known only
// then too (trace.AnnotationsComplete is false; trace.AnnotationsOf
// returns them once OpenReplay has returned Confirmed).
type ReplayFunc[T any] func(r trace.Reader, events int64, bounds *EventBounds) (*replay.Result, T, error)

// OpenReplay opens path as replay.OpenPrepared does and replays it with run,
// which replays with opts (OpenReplay reads only whether opts.Config
// replaces the trace's settings). A snapshot pickle of at least
// MinBytes is replayed while it is imported (see the file
// comment); the result is the same either way. o is nil when the file
// could not be opened (err is then the open's); otherwise the caller
// closes o, and err is run's.
func OpenReplay[T any](path string, opts replay.Options, run ReplayFunc[T]) (o *trace.Opened, res *replay.Result, out T, how Outcome, err error) {
	size, ok := speculable(path)
	if !ok {
		o, _, err = replay.OpenPrepared(path)
		if err != nil {
			return nil, nil, out, NotSpeculated, err
		}
		res, out, err = run(o.Reader, openedEvents(o), nil)
		return o, res, out, NotSpeculated, err
	}
	feed := newSpecFeed(size)
	type specRun struct {
		res *replay.Result
		out T
		err error
	}
	done := make(chan specRun, 1)
	h0 := guessHeader(path)
	stacks := trace.NewStacks()
	r := &specReader{feed: feed, header: h0, stacks: stacks}
	go func() {
		res, out, err := run(r, 0, feed.bounds)
		feed.stop()
		done <- specRun{res: res, out: out, err: err}
	}()
	o, _, err = replay.OpenPreparedWalk(path, feed.walk, feed)
	feed.finish(o, err)
	sp := <-done
	if err != nil {
		return nil, nil, out, NotSpeculated, err
	}
	if !feed.wasAborted() && confirmed(o, h0, opts.Config != nil, feed.bounds, sp.res, sp.err) {
		// The recorders hold the speculative reader's table: it becomes
		// the trace's (the import's own is no longer referred to).
		*stacks = *o.Packed.Stacks
		o.Packed.Stacks = stacks
		// And the import's annotations its (a recorder places them at
		// its Finish, from its per-input counts: AnnotationsLater).
		r.ann = o.Annotations()
		return o, sp.res, sp.out, Confirmed, sp.err
	}
	res, out, err = run(o.Reader, openedEvents(o), nil)
	return o, res, out, Discarded, err
}

// speculable says whether path is a snapshot pickle large enough to
// replay while it is imported, and its size.
func speculable(path string) (int64, bool) {
	if runtime.GOMAXPROCS(0) < MinProcs {
		return 0, false
	}
	// Stat before opening: opening a FIFO to look at it would take its
	// writer's bytes, or leave it writing to no one and the real open
	// waiting for a writer that has gone.
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < MinBytes {
		return 0, false
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var prefix [2]byte
	if _, err := io.ReadFull(f, prefix[:]); err != nil {
		return 0, false
	}
	format, ok := trace.Detect(prefix[:])
	return fi.Size(), ok && format == trace.FormatPyTorch
}

// openedEvents is the number of events of an opened trace, 0 when it is
// not known before it is read (a streamed native trace).
func openedEvents(o *trace.Opened) int64 {
	switch {
	case o.Packed != nil:
		return o.Packed.Events.Len()
	case o.Trace != nil:
		return int64(len(o.Trace.Events))
	}
	return 0
}

// guessHeader is the header the speculative replay replays under: what
// the import of a snapshot recorded from the start with PyTorch's default
// allocator settings (PyTorch writes them since 2.6) gives, as far as the
// replay reads it (Run, setup and finish: the source, the settings, the
// devices; the notes only when an initial state was reconstructed).
func guessHeader(path string) trace.Header {
	return trace.Header{Source: replay.SourcePyTorch, SourceFile: path, AllocatorSettings: config.Default().AllocatorSettings()}
}

// confirmed says whether the speculative replay, under h0 with no
// initial state and the length bounds gave it, was the replay of the
// trace o holds once imported and prepared; override says the replay's
// settings were the options', not the trace's.
func confirmed(o *trace.Opened, h0 trace.Header, override bool, bounds *EventBounds, res *replay.Result, err error) bool {
	p := o.Packed
	if p == nil || p.Initial != nil || p.InitialReconstructed {
		return false
	}
	if lo, hi := bounds.Bounds(); lo != hi || lo != p.Events.Len() {
		return false
	}
	if errors.Is(err, errSpecAborted) || res == nil {
		return false
	}
	h := p.Header
	if h.Source != h0.Source || h.SourceFile != h0.SourceFile {
		return false
	}
	// The settings: the replay's configuration and where it came from
	// (the report shows both), unless the options replaced them.
	if !override {
		if h.AllocatorSettings == nil {
			return false
		}
		got, gerr := config.FromAllocatorSettings(h.AllocatorSettings)
		want, _ := config.FromAllocatorSettings(h0.AllocatorSettings)
		if gerr != nil || !reflect.DeepEqual(got, want) {
			return false
		}
	}
	// The header's devices: the replay makes a device it names on first
	// use, reports one never used as empty, and takes its capacity from
	// it. With none named, the same follows only if the header gives no
	// capacity and the replay used every device it names.
	if len(h.Devices) > 0 {
		if res == nil {
			return false
		}
		used := map[int32]bool{}
		for _, d := range res.Devices {
			used[d.Index] = true
		}
		for _, d := range h.Devices {
			// A name the replay does not read, but a recording of it
			// does (replay.ReplayRecorder's header).
			if d.Capacity != 0 || d.CapacitySource != "" || d.Name != "" || !used[d.Index] {
				return false
			}
		}
	}
	return true
}

// errSpecAborted ends a speculative replay whose import started over or
// failed: its events are not the trace's.
var errSpecAborted = errors.New("speculate: speculative replay aborted")

// specSegment is how many events the feed packs into one segment before
// the reader may take it.
const specSegment = 1 << 16

// specMaxBuffered bounds the packed events the feed holds for the reader
// (bytes): beyond it the import waits for the replay.
const specMaxBuffered = 96 << 20

// specBatch is how many events the feed hands over at a time once the
// reader reads.
const specBatch = 4096

// specFeed takes the events from the import (as an EventObserver, on the
// import's packing goroutine) and hands them to the speculative replay's
// reader: packed into segments until the reader first reads (the import
// may be ahead of the replay by many events then, 72 bytes each
// unpacked), in batches as they are once it reads (the packing and the
// decoding cost as much as the replay's reading). It also keeps the
// bounds on the trace's length (Progress).
type specFeed struct {
	// walk is the reconstruction's, which sees each event before the
	// feed: once it finds a block or segment from before the trace, or
	// an oom (a capacity it may imply), the guess is wrong, and the
	// speculation is given up at once (wrong, below).
	walk *replay.Walk
	cur  *trace.EventLog // being filled (the import's side only)
	raw  []trace.Event   // likewise, once reading
	// reading is set by the reader's first take: from the next event on,
	// the feed hands batches over.
	reading atomic.Bool

	// bounds on the number of events, narrowed from marks (where the
	// entries so far ended in the file, of size bytes) as the import
	// goes on; they meet at the import's count once it is over.
	bounds *EventBounds
	size   int64
	marks  []progressMark

	mu       sync.Mutex
	cond     *sync.Cond
	segs     []specSeg     // complete, not yet taken
	buffered int64         // their bytes
	done     bool          // every event was given (or aborted)
	o        *trace.Opened // the import's result, once done
	aborted  chan struct{} // closed when the events are not the trace's
	abortOne sync.Once
	gone     atomic.Bool // the reader will read no more
}

func newSpecFeed(size int64) *specFeed {
	f := &specFeed{walk: replay.NewWalk(), cur: &trace.EventLog{}, aborted: make(chan struct{}),
		bounds: newEventBounds(), size: size}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// specSeg is what the feed hands over: a packed segment or a batch.
type specSeg struct {
	log *trace.EventLog
	evs []trace.Event
}

func (g specSeg) bytes() int64 {
	if g.log != nil {
		return g.log.Bytes()
	}
	return int64(len(g.evs)) * int64(unsafe.Sizeof(trace.Event{}))
}

// Event implements trace.EventObserver.
func (f *specFeed) Event(_ int64, e *trace.Event) {
	if f.gone.Load() {
		return
	}
	if !f.walk.FromStart() {
		f.abort()
		return
	}
	if f.raw == nil {
		if !f.reading.Load() {
			f.cur.Append(e)
			if f.cur.Len() == specSegment {
				f.hand()
			}
			return
		}
		f.hand() // the segment before the first batch
		f.raw = make([]trace.Event, 0, specBatch)
	}
	f.raw = append(f.raw, *e)
	if len(f.raw) == specBatch {
		f.hand()
	}
}

// hand passes what was filled (the packed segment, or the batch once
// reading) to the reader, waiting while too much is held.
func (f *specFeed) hand() {
	var seg specSeg
	if f.raw != nil {
		if len(f.raw) == 0 {
			return
		}
		seg.evs, f.raw = f.raw, make([]trace.Event, 0, specBatch)
	} else {
		if f.cur.Len() == 0 {
			return
		}
		seg.log, f.cur = f.cur, &trace.EventLog{}
	}
	f.mu.Lock()
	for f.buffered > specMaxBuffered && !f.gone.Load() {
		f.cond.Wait()
	}
	f.segs = append(f.segs, seg)
	f.buffered += seg.bytes()
	f.cond.Broadcast()
	f.mu.Unlock()
}

// Progress implements trace.ProgressObserver: the first events entries
// ended before byte offset. It narrows the bounds (estimateLength), and
// gives the guess up when they cross, or when they are still too wide to
// be worth the profiler's samples once the entries are many.
func (f *specFeed) Progress(events, offset int64) {
	if f.gone.Load() {
		return
	}
	f.marks = append(f.marks, progressMark{events, offset})
	lo, hi := estimateLength(f.marks, f.size)
	f.bounds.narrow(lo, hi)
	lo, hi = f.bounds.Bounds()
	if lo > hi || (events >= specLooseFrom && hi-lo > lo/specLoosest) {
		f.abort()
	}
}

// From specLooseFrom entries on, bounds wider than a specLoosest-th of
// the length give the guess up: the entries' size is not settling (a
// trace of phases of other shapes, or written some other way), and the
// profiler would take a fine sample at a good part of the events.
const specLooseFrom, specLoosest = 1 << 20, 4

// Restart implements trace.EventObserver: the import starts over, whole;
// the events given so far were not the trace's.
func (f *specFeed) Restart() {
	f.abort()
}

// wasAborted says whether the events given were not the trace's.
func (f *specFeed) wasAborted() bool {
	select {
	case <-f.aborted:
		return true
	default:
		return false
	}
}

func (f *specFeed) abort() {
	f.abortOne.Do(func() { close(f.aborted) })
	f.gone.Store(true)
	f.mu.Lock()
	f.cond.Broadcast()
	f.mu.Unlock()
}

// finish ends the events once the import and the preparation are over
// (o, err: OpenPrepared's result).
func (f *specFeed) finish(o *trace.Opened, err error) {
	if err != nil || o == nil || o.Packed == nil {
		f.abort()
	} else if !f.gone.Load() {
		// The count is known: within the bounds, it is the replay's
		// length from now on; outside, the profiler's samples are not
		// that length's.
		n := o.Packed.Events.Len()
		if lo, hi := f.bounds.Bounds(); n < lo || n > hi {
			f.abort()
		} else {
			f.bounds.meet(n)
			f.hand()
		}
	}
	f.mu.Lock()
	f.done, f.o = true, o
	f.cond.Broadcast()
	f.mu.Unlock()
}

// stop says the reader reads no more: the import need not wait for it.
func (f *specFeed) stop() {
	f.gone.Store(true)
	f.mu.Lock()
	f.cond.Broadcast()
	f.mu.Unlock()
}

// take returns what was handed over next, waiting for the import; ok is
// false at the end.
func (f *specFeed) take() (seg specSeg, ok bool, err error) {
	f.reading.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		select {
		case <-f.aborted:
			return seg, false, errSpecAborted
		default:
		}
		if len(f.segs) > 0 {
			seg = f.segs[0]
			f.segs[0] = specSeg{}
			f.segs = f.segs[1:]
			f.buffered -= seg.bytes()
			f.cond.Broadcast()
			return seg, true, nil
		}
		if f.done {
			return seg, false, nil
		}
		f.cond.Wait()
	}
}

// specReader is the speculative replay's trace.Reader: the guessed header,
// no initial state, the feed's events, and the end state once imported.
type specReader struct {
	feed   *specFeed
	header trace.Header
	stacks *trace.Stacks
	ann    []trace.Annotation // the import's, once Confirmed
	cur    *trace.EventCursor // a packed segment being read, or
	evs    []trace.Event      // what is left of a batch
	eof    bool
	err    error
}

func (r *specReader) Header() trace.Header             { return r.header }
func (r *specReader) Stacks() *trace.Stacks            { return r.stacks }
func (r *specReader) Initial() ([]trace.Segment, bool) { return nil, false }
func (r *specReader) Close() error                     { return nil }

// Annotations implements trace.AnnotationReader: none until OpenReplay
// confirmed the replay, the import's then.
func (r *specReader) Annotations() []trace.Annotation { return r.ann }

// AnnotationsLater and StacksLater implement trace.LaterReader: both are
// the import's, and become the reader's once it is over (OpenReplay).
func (r *specReader) AnnotationsLater() bool { return true }
func (r *specReader) StacksLater() bool      { return true }

// Final is the imported end state, once every event was read.
func (r *specReader) Final() ([]trace.Segment, bool) {
	if !r.eof {
		return nil, false
	}
	r.feed.mu.Lock()
	o := r.feed.o
	r.feed.mu.Unlock()
	if o == nil || o.Packed == nil {
		return nil, false
	}
	return o.Packed.Final, o.Packed.HasFinal
}

func (r *specReader) Next(e *trace.Event) error {
	for {
		if len(r.evs) > 0 {
			*e = r.evs[0]
			r.evs = r.evs[1:]
			return nil
		}
		if r.cur != nil && r.cur.Next(e) == nil {
			return nil
		}
		if !r.more() {
			if r.eof {
				return io.EOF
			}
			return r.err
		}
	}
}

// more takes the next segment or batch; false at the end or on abort.
func (r *specReader) more() bool {
	if r.eof || r.err != nil {
		return false
	}
	r.cur, r.evs = nil, nil
	seg, ok, err := r.feed.take()
	switch {
	case err != nil:
		r.err = err
	case !ok:
		r.eof = true
	case seg.log != nil:
		r.cur = seg.log.Cursor()
	default:
		r.evs = seg.evs
	}
	return ok && err == nil
}

// NextBatch implements trace.BatchReader.
func (r *specReader) NextBatch(evs []trace.Event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	if len(r.evs) > 0 {
		n := copy(evs, r.evs)
		r.evs = r.evs[n:]
		return n, nil
	}
	n := 0
	for n < len(evs) && r.cur != nil && r.cur.Next(&evs[n]) == nil {
		n++
	}
	if n > 0 {
		return n, nil
	}
	if err := r.Next(&evs[0]); err != nil {
		return 0, err
	}
	return 1, nil
}

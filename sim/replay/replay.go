// Package replay drives the caching allocator with a recorded trace on a
// simulated device, and checks its decisions against the recording's.
// Options.NewProcess puts it on another device instead, such as the real
// GPU of package realgpu: the replay reaches its device only through the
// Process interface (process.go).
//
// # Inputs and decisions
//
// A trace mixes two kinds of entries. Inputs are what the program asked:
// alloc (a size on a stream), free_requested and free_completed, empty_cache,
// stream synchronisation, trial boundaries and markers. Decisions are what
// the recording allocator did about them: segment_alloc, segment_free,
// segment_map, segment_unmap and oom, plus the address each alloc got. A
// replay feeds the inputs to a fresh allocator and lets it decide; with the
// recording's own settings the decisions must come out the same, which is
// what Check verifies.
//
// Decisions precede the input that caused them (PyTorch records a malloc's
// releases and new segments before its alloc entry, and an oom instead of
// it). So decisions go into a per-device queue of expectations as they are
// read, and each decision the replayed allocator makes (seen through an
// observer) is compared with the head of that queue. After each input the
// queue is drained: whatever the replay did not reproduce counts as
// unmatched. An oom entry is both a decision and an input: the malloc that
// failed left no alloc entry, so the replay makes the same request.
//
// PyTorch does not record empty_cache itself, only the segment_free entries
// it causes; in a PyTorch trace a run of releases that no malloc can account
// for (one followed by an input other than an alloc that needed a new
// segment, or by an alloc served from the cache) is replayed as
// empty_cache. Native traces record empty_cache explicitly, after its
// releases.
//
// # Frees
//
// free_requested is the program's free; free_completed is the block's
// return to its pool, later when the block was used on other streams
// (record_stream). A free_requested followed at once by its free_completed
// is one Free. Otherwise the replay marks the block as used on a private
// stream before freeing it, and completes that stream's event when the
// trace shows free_completed, so the block returns to the pool at the same
// point as in the recording. When the trace said which streams used the
// block (record_stream), the allocator waits for their events itself; at
// the free_completed the replay only processes the events already
// complete (a stream_sync before it), as the recording allocator had.
//
// # Addresses
//
// Recorded addresses name blocks: the replay keeps a map from each recorded
// address to the replayed block. The device (device.go) gives segments the
// recorded addresses when it can, so that ties break the same way.
package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/trace"
)

// Options configure a replay.
type Options struct {
	// Name names the trace in error messages (a file name).
	Name string
	// Config replaces the trace's own allocator settings when non-nil.
	Config *config.Config
	// Capacity is each device's memory in bytes; 0 takes it from the trace
	// header (which importers fill in from oom entries) or, when unknown,
	// uses UnknownCapacity.
	Capacity uint64
	// OOM says what to do when the replay runs out of memory where the
	// recording did not.
	OOM OOMPolicy
	// Check compares decisions with the recording's and fills
	// Result.Check. It also makes the device fail exactly where the
	// recording's failed.
	Check bool
	// Lenient counts and skips bad events (a free of an unknown address, a
	// double free) instead of failing with an error.
	Lenient bool
	// Recorder, when set, watches the replay (the profiler).
	Recorder Recorder
	// StopAfter, when positive, ends the replay after that many events.
	StopAfter int64
	// Progress, when set, is called every ProgressEvery events (at the
	// first count at or past each multiple) with the
	// count so far.
	Progress func(events int64)
	// ExpectStats, when set, compares the end-of-trace statistics of its
	// device with the recording process's torch.cuda.memory_stats() and
	// fills Result.StatsCheck (memstats.go). Set Check too: only check
	// mode fails the device where the recording's failed, and a failure
	// that a retry absorbed leaves no oom entry for a capacity to imply.
	ExpectStats *MemoryStats
	// InvariantChecks verifies the allocator after every operation (tests).
	InvariantChecks bool
	// Policy replaces PyTorch's policy (allocator.NewPolicy). Under another
	// policy, a partial trace's live blocks are placed by the policy
	// (PlaceInitial) rather than rebuilt in the recorded segments.
	Policy allocator.Policy
	// TimeMallocs measures the wall time of the allocator's mallocs
	// (DeviceResult.MallocNS).
	TimeMallocs bool
	// NewProcess, when set, makes the device each traced device replays on
	// (package realgpu's Backend.NewProcess: the real GPU); nil replays on
	// a simulated GPU of the capacity above. Whoever made the processes
	// closes them after the replay (and after reading the recorders).
	NewProcess NewProcessFunc
}

// ProgressEvery is how often Options.Progress is called, in events.
const ProgressEvery = 1 << 16

// UnknownCapacity is the device memory used when neither the options nor the
// trace say: large enough that only a recorded limit (memory fraction) or a
// scripted failure makes a replay run out.
const UnknownCapacity = uint64(1) << 40

// maxProblems bounds Result.Problems.
const maxProblems = 20

// synthStreamBase numbers the private streams on which deferred frees wait.
const synthStreamBase = uint64(0xfffffff000000000)

// Run replays r. Bad input is a *trace.FormatError naming the event; an
// allocator failure that is not out-of-memory (a sticky device error) ends
// the replay with an error too.
func Run(r trace.Reader, opts Options) (*Result, error) {
	h := r.Header()
	rp := &replayer{
		opts:   opts,
		r:      r,
		header: h,
		res:    &Result{StoppedAt: -1},
		devs:   map[int32]*devState{},
		infer:  h.Source == SourcePyTorch,
	}
	if rp.opts.Name == "" {
		rp.opts.Name = h.SourceFile
	}
	rp.res.Policy = allocator.PyTorch{}.Name()
	if opts.Policy != nil {
		rp.res.Policy = opts.Policy.Name()
	}
	rp.inputs, _ = opts.Recorder.(inputRecorder)
	rp.markers, _ = opts.Recorder.(MarkerRecorder)
	rp.stepDue = &rp.everyStep
	if g, ok := opts.Recorder.(StepGate); ok {
		rp.stepDue = g.GateSteps(&rp.pos)
	}
	rp.batch, _ = r.(trace.BatchReader)
	if err := rp.setup(); err != nil {
		return nil, err
	}
	err := rp.loop()
	rp.res.Events = rp.n
	if err != nil {
		return rp.res, err
	}
	if err := rp.finish(); err != nil {
		return rp.res, err
	}
	return rp.res, nil
}

// SourcePyTorch is the header Source of traces imported from PyTorch
// snapshots.
const SourcePyTorch = "pytorch-snapshot"

type replayer struct {
	opts   Options
	r      trace.Reader
	header trace.Header
	res    *Result
	cfg    config.Config
	devs   map[int32]*devState
	// lastDev is the device of the last lookup.
	lastDev *devState
	// beforeStack is beforeTraceStack's answer, once asked.
	beforeStack    trace.StackID
	hasBeforeStack bool
	order          []int32 // device indices in creation order
	infer          bool    // infer empty_cache from release runs (PyTorch traces)

	// buf holds the events read: buf[ahead-1] is the one being replayed
	// (used in place), buf[ahead:] those read ahead, in batches when the
	// reader has them (batch) and to pair a free_requested with its
	// free_completed or see what follows one. Slots are rewritten only
	// between events, so a pointer into buf stays good for the event.
	buf   []trace.Event
	ahead int
	batch trace.BatchReader
	eof   bool
	rerr  error // a read error, returned once the events before it are replayed
	// n counts the events read so far. An event that took the next one
	// with it (consume: a free_requested its free_completed) leaves n one
	// further and that event at buf[ahead-1], which is how the loop knows
	// to report it to the recorder after its own (no flag or pointer to
	// keep on every event: issue 19).
	n int64
	// stepDue is the least index whose event the recorder's Step is
	// called for: everyStep (0) unless the recorder is a StepGate, which
	// reads pos instead of being told every event.
	stepDue   *int64
	everyStep int64
	pos       Position
	check     *CheckResult
	// inputs is opts.Recorder when it records the replay as a trace
	// (ReplayRecorder): told the inputs the replay applies or makes up.
	inputs inputRecorder
	// markers is the recorder's MarkerRecorder, if it is one.
	markers MarkerRecorder
	// decisionsRead and allocsRead count the trace's decision and alloc
	// entries (in check mode only): whether a check has anything to
	// compare.
	decisionsRead, allocsRead int64
	// initBy holds the initial segments by device; hdr the header's entry
	// for each device (the first with a capacity).
	initBy map[int32][]*trace.Segment
	hdr    map[int32]trace.Device
}

func (rp *replayer) setup() error {
	switch {
	case rp.opts.Config != nil:
		rp.cfg = *rp.opts.Config
		rp.res.ConfigSource = "override"
	case rp.header.AllocatorSettings != nil:
		c, err := config.FromAllocatorSettings(rp.header.AllocatorSettings)
		if err != nil {
			return &trace.FormatError{File: rp.opts.Name, Offset: -1, Event: -1, Msg: "allocator_settings", Err: err}
		}
		rp.cfg = c
		rp.res.ConfigSource = "trace"
	default:
		rp.cfg = config.Default()
		rp.res.ConfigSource = "default"
	}
	rp.res.Config = rp.cfg
	if rp.opts.Check {
		rp.check = &CheckResult{}
		rp.res.Check = rp.check
	}
	init, reconstructed := rp.r.Initial()
	if reconstructed {
		rp.res.Reconstructed = summarize(init, rp.header.Notes)
	}
	// Per-device views, built once: a trace may name tens of thousands of
	// devices, and a lookup per device must not walk them all.
	rp.initBy = map[int32][]*trace.Segment{}
	for i := range init {
		rp.initBy[init[i].Device] = append(rp.initBy[init[i].Device], &init[i])
	}
	rp.hdr = map[int32]trace.Device{}
	for _, d := range rp.header.Devices {
		if _, seen := rp.hdr[d.Index]; !seen || (rp.hdr[d.Index].Capacity == 0 && d.Capacity != 0) {
			rp.hdr[d.Index] = d
		}
	}
	for i := range init {
		if _, err := rp.device(init[i].Device); err != nil {
			return err
		}
	}
	for _, d := range rp.header.Devices {
		if !validDevice(d.Index) {
			if rp.opts.Lenient {
				continue // its events are counted as skipped, one by one
			}
			return rp.bad(-1, fmt.Sprintf("device %d out of range (0 to %d)", d.Index, MaxDevice))
		}
		if rp.opts.NewProcess != nil {
			// A real device describes itself (name, memory): open it.
			if _, err := rp.device(d.Index); err != nil {
				return err
			}
		}
		// A simulated device the header names but nothing uses costs
		// nothing: it is made on first use, or reported empty (finish).
	}
	return nil
}

// device returns the state of device i, creating its allocator (and
// restoring its initial segments) on first use.
func (rp *replayer) device(i int32) (*devState, error) {
	if d := rp.lastDev; d != nil && d.index == i {
		return d, nil // traces are mostly of one device: no map lookup
	}
	if d := rp.devs[i]; d != nil {
		rp.lastDev = d
		return d, nil
	}
	if !validDevice(i) {
		// Under Lenient, bad counts the event and returns nil: the
		// caller skips it.
		return nil, rp.bad(rp.n-1, fmt.Sprintf("device %d out of range (0 to %d)", i, MaxDevice))
	}
	if len(rp.devs) >= MaxDevices {
		return nil, rp.bad(rp.n-1, fmt.Sprintf("device %d: more than %d devices in use", i, MaxDevices))
	}
	capacity, source := rp.capacity(i)
	newProc := rp.opts.NewProcess
	if newProc == nil {
		newProc = newSimProcess
	}
	proc, err := newProc(i, capacity, source)
	if err != nil {
		return nil, fmt.Errorf("replay: device %d: %w", i, err)
	}
	var name string
	measured := false
	if ds, ok := proc.(Describer); ok {
		info := ds.Info()
		capacity, source, name, measured = info.Capacity, info.CapacitySource, info.Name, info.MeasuredTime
	}
	d := &devState{rp: rp, index: i, proc: proc, fast: !rp.infer,
		capacity: capacity, capacitySource: source, name: name, measured: measured}
	if source == SourceUnknown {
		d.unusedCapacity = rp.unusedCapacity(i)
	}
	d.dev = &device{p: proc, d: d, script: rp.opts.Check}
	// The replay calls each device's allocator from its one goroutine.
	aopts := []allocator.Option{allocator.WithDeviceIndex(int(i)), allocator.WithoutLocking()}
	if rp.opts.InvariantChecks {
		aopts = append(aopts, allocator.WithInvariantChecks())
	}
	if rp.opts.Policy != nil {
		aopts = append(aopts, allocator.WithPolicy(rp.opts.Policy))
	}
	a, err := allocator.New(d.dev, rp.cfg, aopts...)
	if err != nil {
		return nil, fmt.Errorf("replay: device %d: %w", i, err)
	}
	// A policy may change the settings (stitch turns expandable segments
	// on): the result shows those in force.
	if c := a.Config(); c.ExpandableSegments != rp.res.Config.ExpandableSegments {
		rp.res.Config = c
		rp.res.ConfigSource += ", expandable segments by the " + rp.opts.Policy.Name() + " policy"
	}
	d.a = a
	// Only decisions are compared: an alloc and its free, the usual events,
	// then call no observer at all.
	a.AddObserverFor(allocator.Decisions, d.observe)
	rp.devs[i] = d
	rp.order = append(rp.order, i)
	if rp.opts.Recorder != nil {
		rp.opts.Recorder.Attach(i, a, proc)
	}
	if err := d.restore(); err != nil {
		return nil, err
	}
	// The restored segments' cudaMallocs happened before the trace.
	d.baseline = proc.Counters()
	if rp.opts.Recorder != nil {
		rp.opts.Recorder.Restored(i)
	}
	return d, nil
}

// timedMalloc is the allocator's Malloc, timed (Options.TimeMallocs).
func (d *devState) timedMalloc(size uint64, s allocator.Stream) (*allocator.Block, error) {
	start := time.Now()
	b, err := d.a.Malloc(size, s)
	d.mallocNS += time.Since(start).Nanoseconds()
	d.mallocs++
	return b, err
}

// MaxDevice is the largest device ordinal a trace may name.
const MaxDevice = 1 << 16

// MaxDevices is the most devices one replay gives an allocator: those
// with events or segments. Each costs about 80 KB (its allocator, its
// profiler state), so a snapshot of a few hundred KB whose device_traces
// repeats one memoized trace 65,537 times took 5 GB; a CUDA process sees
// a few dozen devices at most. Devices the trace only names (an empty
// device trace, a header entry) cost nothing and do not count.
const MaxDevices = 1024

func validDevice(i int32) bool { return i >= 0 && i <= MaxDevice }

func (rp *replayer) capacity(i int32) (uint64, string) {
	if rp.opts.Capacity > 0 {
		return rp.opts.Capacity, "option"
	}
	if d, ok := rp.hdr[i]; ok && d.Capacity != 0 {
		if d.CapacitySource == "" {
			return d.Capacity, "trace header"
		}
		if !rp.opts.Check {
			return d.Capacity, d.CapacitySource
		}
		// In check mode the device fails where the recording's did; an
		// implied size could only add failures of its own.
	}
	return UnknownCapacity, SourceUnknown
}

// unusedCapacity describes the capacity device i's oom entries imply when
// check mode does not use it ("" when there is none).
func (rp *replayer) unusedCapacity(i int32) string {
	if !rp.opts.Check || rp.opts.Capacity > 0 {
		return ""
	}
	if d, ok := rp.hdr[i]; ok && d.Capacity != 0 && d.CapacitySource != "" {
		return allocator.FormatSize(d.Capacity) + " " + d.CapacitySource
	}
	return ""
}

// SourceUnknown is the CapacitySource of a device whose capacity neither
// the options nor the trace give (or only an estimate check mode does not
// use): UnknownCapacity, which does not run out.
const SourceUnknown = "unknown"

// batchEvents is how many events one read asks a BatchReader for: enough
// to make the call's cost vanish, few enough that the batch stays in the
// first-level cache.
const batchEvents = 128

// more reads events after the last in buf, at least one, without moving
// those already there (a new array when it is full: the old one, which an
// event being replayed may point into, stays as it is). It reports false
// at the end of the trace (eof) or on a read error (rerr).
func (rp *replayer) more() bool {
	if rp.eof || rp.rerr != nil {
		return false
	}
	l := len(rp.buf)
	if rp.batch == nil {
		rp.buf = append(rp.buf, trace.Event{})
		if err := rp.r.Next(&rp.buf[l]); err != nil {
			rp.buf = rp.buf[:l]
			rp.readErr(err)
			return false
		}
		return true
	}
	if l == cap(rp.buf) {
		rp.buf = slices.Grow(rp.buf, batchEvents)
	}
	n, err := rp.batch.NextBatch(rp.buf[l:min(cap(rp.buf), l+batchEvents)])
	rp.buf = rp.buf[:l+n]
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress // a reader that breaks BatchReader's contract
		}
		rp.readErr(err)
		return false
	}
	return true
}

func (rp *replayer) readErr(err error) {
	if err == io.EOF {
		rp.eof = true
	} else {
		rp.rerr = err
	}
}

// refill starts the drained buffer over with the next batch.
func (rp *replayer) refill() (*trace.Event, error) {
	rp.buf, rp.ahead = rp.buf[:0], 0
	if !rp.more() {
		if rp.eof {
			return nil, io.EOF
		}
		return nil, rp.rerr
	}
	rp.ahead = 1
	return &rp.buf[0], nil
}

// peekNext is peek(0) with its common case first: the event is already
// read, as it nearly always is (events come in batches).
func (rp *replayer) peekNext() (*trace.Event, error) {
	if k := rp.ahead; k < len(rp.buf) {
		return &rp.buf[k], nil
	}
	return rp.peek(0)
}

// consume takes the next event (which peek has returned) as handled by
// the current one; an event consumes at most one.
func (rp *replayer) consume() {
	if rp.ahead == len(rp.buf) && !rp.more() {
		return
	}
	rp.ahead++
	rp.n++
}

// peek returns the k-th event after the current one (k = 0 is the next),
// or nil past the end. The pointer is valid until the current event is
// done.
func (rp *replayer) peek(k int) (*trace.Event, error) {
	for rp.ahead+k >= len(rp.buf) {
		if !rp.more() {
			if rp.eof {
				return nil, nil
			}
			return nil, rp.rerr
		}
	}
	return &rp.buf[rp.ahead+k], nil
}

func (rp *replayer) loop() error {
	// StopAfter and Progress are looked at only from the event count
	// checkAt on (one compare an event for both): rp.n can grow by two in
	// an event (consume), so reaching checkAt does not mean StopAfter is
	// due, and Progress is called at the first count at or past each
	// multiple of ProgressEvery (progressAt), not only on the multiple
	// itself, which a trace whose frees all come in pairs steps over every
	// time (the progress line then never moved).
	checkAt := rp.checkAt()
	progressAt := int64(math.MaxInt64)
	if rp.opts.Progress != nil {
		progressAt = nextProgress(rp.n)
	}
	for {
		if rp.n >= checkAt && rp.opts.StopAfter > 0 && rp.n >= rp.opts.StopAfter {
			return nil
		}
		// The next event, in place in buf, or io.EOF after the last.
		// Between events nothing points into buf, so a drained buffer
		// starts over (refill). Written out here: as a method it was
		// over the inlining budget.
		var e *trace.Event
		var err error
		if k := rp.ahead; k < len(rp.buf) {
			rp.ahead = k + 1
			e = &rp.buf[k]
		} else if e, err = rp.refill(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		idx := rp.n
		rp.n++
		if rp.n >= checkAt {
			if rp.n >= progressAt {
				rp.opts.Progress(rp.n)
				progressAt = nextProgress(rp.n)
			}
			checkAt = rp.checkAt()
		}
		d := rp.lastDev
		if d == nil || d.index != e.Device {
			if d, err = rp.device(e.Device); err != nil {
				return err
			}
			if d == nil {
				continue // an out-of-range device, counted as skipped (Lenient)
			}
		}
		if rp.check != nil {
			switch {
			case e.Action.IsDecision():
				rp.decisionsRead++
			case e.Action == trace.ActionAlloc:
				rp.allocsRead++
			}
		}
		// The event: the usual alloc and free_requested here, with
		// event's steps for them (see devState.fast), the rest in event.
		var stop bool
		switch a := e.Action; {
		case a == trace.ActionAlloc && d.fast:
			d.curInput = idx
			stop, err = d.alloc(idx, e)
			if len(d.deferred) > 0 && err == nil {
				err = d.completeDeferred(idx)
			}
			if d.expectIdx < len(d.expect) {
				d.drain(idx)
			}
		case a == trace.ActionFreeRequested && d.fast:
			d.curInput = idx
			err = d.freeRequested(idx, e)
			if d.expectIdx < len(d.expect) {
				d.drain(idx)
			}
		default:
			stop, err = d.event(idx, e)
		}
		if err != nil {
			return err
		}
		if rec := rp.opts.Recorder; rec != nil {
			if n := rp.n; n <= *rp.stepDue {
				// Neither the event nor the one it consumed (see
				// n) is due: only the position moves, to the
				// later's index and latest time.
				rp.pos.Next = n
				if t := rp.buf[rp.ahead-1].TimeUS; t != 0 {
					rp.pos.TimeUS = t
				} else if t := e.TimeUS; t != 0 {
					rp.pos.TimeUS = t
				}
			} else {
				rp.step(rec, idx, e)
			}
		}
		if stop {
			rp.res.Stopped = true
			rp.res.StoppedAt = idx
			return nil
		}
	}
}

// step reports the event at idx to the recorder, and after it the one it
// consumed, if any (see n): each moves the position and is stepped if due.
func (rp *replayer) step(rec Recorder, idx int64, e *trace.Event) {
	rp.pos.Next = idx + 1
	if t := e.TimeUS; t != 0 {
		rp.pos.TimeUS = t
	}
	if idx >= *rp.stepDue {
		rec.Step(idx, e)
	}
	if ci := idx + 1; rp.n != ci {
		c := &rp.buf[rp.ahead-1]
		rp.pos.Next = ci + 1
		if t := c.TimeUS; t != 0 {
			rp.pos.TimeUS = t
		}
		if ci >= *rp.stepDue {
			rec.Step(ci, c)
		}
	}
}

// nextProgress is the multiple of ProgressEvery after n.
func nextProgress(n int64) int64 { return (n/ProgressEvery + 1) * ProgressEvery }

// checkAt is the smallest event count after rp.n at which StopAfter may
// end the replay or Progress be due (StopAfter itself when it has
// passed), or the largest count when neither is set.
func (rp *replayer) checkAt() int64 {
	at := int64(math.MaxInt64)
	if rp.opts.StopAfter > 0 {
		at = rp.opts.StopAfter
	}
	if rp.opts.Progress != nil {
		at = min(at, nextProgress(rp.n))
	}
	return at
}

// bad reports bad input at event idx: an error, or under Lenient a count.
func (rp *replayer) bad(idx int64, msg string) error {
	if rp.opts.Lenient {
		rp.res.Skipped++
		if len(rp.res.Problems) < maxProblems {
			rp.res.Problems = append(rp.res.Problems, fmt.Sprintf("event %d: %s", idx, msg))
		}
		return nil
	}
	return &trace.FormatError{File: rp.opts.Name, Offset: -1, Event: idx, Msg: msg}
}

func (rp *replayer) finish() error {
	if ar, ok := rp.opts.Recorder.(AnnotationRecorder); ok {
		if ann := trace.AnnotationsOf(rp.r); len(ann) > 0 {
			ar.Annotations(ann)
		}
	}
	final, hasFinal := rp.r.Final()
	if c := rp.check; c != nil && !Checkable(rp.header.Source, rp.decisionsRead, rp.allocsRead, len(final)) {
		// Without recorded decisions, an alloc's address is the
		// recorder's (RMM's pool, a generator), not a caching allocator's
		// decision; with no alloc either, a final state only repeats the
		// initial one rebuilt from it. The end layout is still compared
		// (FinalSegmentsMatch): the rebuilt state must be consistent.
		*c = CheckResult{NothingToCheck: true}
	}
	if rp.res.Stopped {
		hasFinal = hasFinal && false
	}
	// Devices that appear only in the final state.
	if hasFinal && !rp.res.Stopped {
		for i := range final {
			if !validDevice(final[i].Device) && rp.opts.Lenient {
				continue
			}
			if _, err := rp.device(final[i].Device); err != nil {
				return err
			}
		}
	}
	if ms := rp.opts.ExpectStats; ms != nil && ms.Device >= 0 && rp.devs[ms.Device] == nil {
		if _, named := rp.hdr[ms.Device]; named {
			if _, err := rp.device(ms.Device); err != nil {
				return err
			}
		}
	}
	finalBy := map[int32][]trace.Segment{}
	if hasFinal {
		for i := range final {
			finalBy[final[i].Device] = append(finalBy[final[i].Device], final[i])
		}
	}
	sort.Slice(rp.order, func(i, j int) bool { return rp.order[i] < rp.order[j] })
	empty := rp.emptyDevices()
	var stats *allocator.Stats
	if len(empty) > 0 {
		stats = rp.emptyStats()
	}
	rp.res.Devices = make([]DeviceResult, 0, len(rp.order)+len(empty))
	match := true
	for _, i := range rp.order {
		for len(empty) > 0 && empty[0] < i {
			rp.res.Devices = append(rp.res.Devices, rp.emptyResult(empty[0], stats))
			empty = empty[1:]
		}
		d := rp.devs[i]
		if !rp.res.Stopped {
			if err := d.endOfTrace(); err != nil {
				return err
			}
		}
		d.drain(rp.n - 1)
		snap := d.a.Snapshot()
		rp.res.Devices = append(rp.res.Devices, DeviceResult{
			Index: i, Capacity: d.capacity, CapacitySource: d.capacitySource, UnusedCapacity: d.unusedCapacity, Name: d.name,
			Stats: d.a.Stats(), Counters: d.counters(), TimeMeasured: d.measured, Final: snap,
			Mallocs: d.mallocs, MallocNS: d.mallocNS,
		})
		if rp.check != nil && hasFinal {
			if diff := compareFinal(i, finalBy[i], snap, d.aliases.translate); diff != "" && match {
				match = false
				rp.check.FinalDifference = diff
			}
		}
	}
	for _, i := range empty {
		rp.res.Devices = append(rp.res.Devices, rp.emptyResult(i, stats))
	}
	if rp.check != nil && hasFinal {
		rp.check.FinalSegmentsMatch = &match
	}
	if ms := rp.opts.ExpectStats; ms != nil {
		dev, err := rp.statsDevice(ms)
		if err != nil {
			return err
		}
		got := rp.devs[dev].a.Stats()
		rp.res.StatsCheck = checkStats(ms, dev, got.Map(), rp.infer, rp.res.Reconstructed != nil, rp.res.Stopped)
	}
	if rp.check != nil && rp.res.Stopped && rp.check.FirstDivergence == nil && !rp.check.NothingToCheck {
		rp.check.FirstDivergence = &Divergence{Index: rp.res.StoppedAt, Expected: "the replay to continue",
			Actual: "stopped by out of memory"}
	}
	return nil
}

// emptyDevices returns, in order, the devices the header names that nothing
// used: no allocator is made for them, and none is needed to say that they
// hold nothing.
func (rp *replayer) emptyDevices() []int32 {
	var out []int32
	for i := range rp.hdr {
		if rp.devs[i] == nil && validDevice(i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// emptyResult describes the unused device i; stats are a fresh
// allocator's (emptyStats).
func (rp *replayer) emptyResult(i int32, stats *allocator.Stats) DeviceResult {
	capacity, source := rp.capacity(i)
	r := DeviceResult{Index: i, Capacity: capacity, CapacitySource: source, Stats: *stats}
	if source == SourceUnknown {
		r.UnusedCapacity = rp.unusedCapacity(i)
	}
	return r
}

// emptyStats are the statistics of a fresh allocator with the replay's
// settings (some follow them), made once for every unused device.
func (rp *replayer) emptyStats() *allocator.Stats {
	stats := new(allocator.Stats)
	if p, err := newSimProcess(0, UnknownCapacity, SourceUnknown); err == nil {
		if a, err := allocator.New(p, rp.cfg); err == nil {
			*stats = a.Stats()
		}
	}
	return stats
}

// counters are the device calls the replay made, the restore's excluded.
func (d *devState) counters() gpu.Counters {
	c := d.proc.Counters()
	c.Sub(d.baseline)
	return c
}

// devState is one device's replay: its allocator, process (simulated or
// real), live blocks by recorded address and the queue of expected
// decisions.
type devState struct {
	rp    *replayer
	index int32
	a     *allocator.Allocator
	proc  Process
	dev   *device

	capacity       uint64
	capacitySource string
	unusedCapacity string       // DeviceResult.UnusedCapacity
	name           string       // the device's name (Describer); "" when simulated
	measured       bool         // the process measures its calls' time
	baseline       gpu.Counters // device calls of the restore, not the trace's

	mallocs, mallocNS int64 // Options.TimeMallocs

	live   liveTable
	failed map[uint64]struct{} // addresses whose alloc the replay skipped (OOMSkip)
	synth  uint64              // private streams handed out

	trial    int32 // current trial number (0 before any trial marker)
	trials   int32
	skipping bool // the OOM policy dropped the current trial
	// fast: neither skipping nor inferring empty_cache (rp.infer), so
	// the loop replays an alloc or a free_requested itself, with event's
	// steps for them and without its tests for the other actions or its
	// call (issue 19).
	fast bool

	// deferred are the private streams of blocks whose free_completed the
	// recording's synchronisation caused: the replayed allocator's own
	// synchronisation should complete them.
	deferred []allocator.Stream
	// aliases maps recorded expandable reservations to the replay's, for
	// reservations the replay had to place before the trace named them.
	aliases xranges

	expect    []expectation // recorded decisions not yet compared
	expectIdx int           // head of expect
	curInput  int64         // index of the input being served
}

type liveBlock struct {
	b       *allocator.Block
	stack   trace.StackID
	trial   int32
	at      int64 // event index of its alloc, -1 when restored
	synth   allocator.Stream
	pending bool // freed, waiting for its free_completed
	// exact is set once the trace said which streams used the block
	// (record_stream): its free then waits on those streams' events, and
	// its free_completed is the allocator's to decide.
	exact bool
}

type expectation struct {
	idx    int64
	action trace.Action
	addr   uint64
	size   uint64
	stream uint64
}

func (x *expectation) String() string {
	if x.action == trace.ActionOOM {
		return fmt.Sprintf("oom of %d bytes on stream %d", x.size, x.stream)
	}
	return fmt.Sprintf("%s of %d bytes at %#x", x.action, x.size, x.addr)
}

func (d *devState) head() *expectation {
	if d.expectIdx < len(d.expect) {
		return &d.expect[d.expectIdx]
	}
	return nil
}

func (d *devState) push(idx int64, e *trace.Event) {
	if d.expectIdx == len(d.expect) {
		d.expect = d.expect[:0]
		d.expectIdx = 0
	}
	d.expect = append(d.expect, expectation{idx: idx, action: e.Action, addr: e.Addr, size: e.Size, stream: e.Stream})
	if c := d.rp.check; c != nil {
		c.DecisionsExpected++
	}
}

// observe receives the replayed allocator's decisions (under its lock).
func (d *devState) observe(t allocator.TraceEntry) {
	var act trace.Action
	switch t.Action {
	case allocator.ActionSegmentAlloc:
		act = trace.ActionSegmentAlloc
	case allocator.ActionSegmentFree:
		act = trace.ActionSegmentFree
	case allocator.ActionSegmentMap:
		act = trace.ActionSegmentMap
	case allocator.ActionSegmentUnmap:
		act = trace.ActionSegmentUnmap
	case allocator.ActionOOM:
		act = trace.ActionOOM
	default:
		return
	}
	got := expectation{action: act, addr: t.Addr, size: t.Size, stream: uint64(t.Stream)}
	h := d.head()
	if h == nil {
		d.diverge(d.curInput, "nothing", got.String())
		return
	}
	d.expectIdx++
	ok := h.action == act && h.size == got.size && h.stream == got.stream
	if act != trace.ActionOOM {
		want := d.aliases.translate(h.addr)
		if ok && act == trace.ActionSegmentMap && want != got.addr {
			want = d.alias(h.addr, got.addr)
		}
		ok = ok && want == got.addr
	}
	if ok {
		d.matched()
	} else {
		d.diverge(h.idx, h.String(), got.String())
	}
}

func (d *devState) matched() {
	if c := d.rp.check; c != nil {
		c.DecisionsMatched++
	}
}

func (d *devState) diverge(idx int64, expected, actual string) {
	if c := d.rp.check; c != nil && c.FirstDivergence == nil {
		c.FirstDivergence = &Divergence{Index: idx, Device: d.index, Expected: expected, Actual: actual}
	}
}

// drain counts the expectations the last input left unmatched.
func (d *devState) drain(idx int64) {
	for h := d.head(); h != nil; h = d.head() {
		d.expectIdx++
		d.diverge(h.idx, h.String(), "nothing")
	}
}

// event replays one event; stop asks the loop to end (OOMStop). The
// loop replays the usual alloc and free_requested itself (devState.fast).
func (d *devState) event(idx int64, e *trace.Event) (stop bool, err error) {
	if e.Action.IsDecision() {
		if d.skipping {
			return false, nil
		}
		d.push(idx, e)
		if e.Action != trace.ActionOOM {
			return false, nil
		}
	}
	if d.skipping {
		if e.Action == trace.ActionTrialStart {
			d.skipping, d.fast = false, !d.rp.infer
		} else {
			d.rp.res.Skipped++
			return false, nil
		}
	}
	d.curInput = idx
	if d.rp.infer {
		if err := d.inferEmptyCache(idx, e); err != nil {
			return false, err
		}
	}
	switch e.Action {
	case trace.ActionAlloc:
		stop, err = d.alloc(idx, e)
	case trace.ActionOOM:
		err = d.recordedOOM(idx, e)
	case trace.ActionFreeRequested:
		err = d.freeRequested(idx, e)
	case trace.ActionFreeCompleted:
		err = d.freeCompleted(idx, e)
	case trace.ActionEmptyCache:
		err = d.a.EmptyCache()
		d.applied(e, err)
	case trace.ActionStreamSync:
		d.proc.CompleteEvents(allocator.Stream(e.Stream))
		d.applied(e, nil)
	case trace.ActionTrialStart:
		d.trials++
		d.trial = d.trials
		d.applied(e, nil)
	case trace.ActionTrialEnd:
		d.trial = 0
		d.applied(e, nil)
	case trace.ActionMarker:
		if m := d.rp.markers; m != nil {
			m.Marker(d.index, idx, e)
		}
		d.applied(e, nil)
	case trace.ActionRecordStream:
		err = d.recordStream(idx, e)
	default:
		err = d.rp.bad(idx, fmt.Sprintf("unknown action %s", e.Action))
	}
	if e.Action == trace.ActionFreeCompleted || (e.Action == trace.ActionMarker && d.rp.infer) {
		// Possibly part of a malloc's synchronisation, between its
		// releases and its oom: its decisions are not all in yet. A
		// PyTorch trace's marker (≈2.4's user_defined entry, another
		// thread's) can fall inside a malloc's run as well.
		return stop, err
	}
	if len(d.deferred) > 0 && err == nil && (e.Action == trace.ActionAlloc || e.Action == trace.ActionOOM || e.Action == trace.ActionEmptyCache) {
		// The malloc (or empty_cache) that should have synchronised them
		// is done.
		err = d.completeDeferred(idx)
	}
	if d.expectIdx < len(d.expect) {
		d.drain(idx)
	}
	return stop, err
}

// applied tells a recorder of the replay (ReplayRecorder) that the input e
// was applied, unless err says it failed.
func (d *devState) applied(e *trace.Event, err error) {
	if in := d.rp.inputs; in != nil && err == nil {
		in.input(d.index, e)
	}
}

// emptyCache replays an empty_cache the trace leaves implicit.
func (d *devState) emptyCache() error {
	err := d.a.EmptyCache()
	d.applied(&trace.Event{Action: trace.ActionEmptyCache, Device: d.index}, err)
	return err
}

// usePrivate marks b as used on the private stream s, so that its free
// waits for s's event.
func (d *devState) usePrivate(b *allocator.Block, s allocator.Stream) error {
	if err := d.a.RecordStream(b, s); err != nil {
		return err
	}
	if in := d.rp.inputs; in != nil {
		in.privateStream(d.index, b, s)
	}
	return nil
}

// completePrivate completes the events of the private stream s.
func (d *devState) completePrivate(s allocator.Stream) {
	d.proc.CompleteEvents(s)
	if in := d.rp.inputs; in != nil {
		in.privateStream(d.index, nil, s)
	}
}

// completeDeferred completes the events of deferred frees that the
// replayed allocator did not synchronise itself (it decided otherwise).
func (d *devState) completeDeferred(idx int64) error {
	for _, s := range d.deferred {
		d.completePrivate(s)
	}
	d.deferred = d.deferred[:0]
	if err := d.a.ProcessEvents(); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	return nil
}

// alias records that the recorded reservation holding rec is the replay's
// reservation at ours, when ours is the base of a reservation the device
// placed on its own and nothing is mapped there yet, and returns the
// translation of rec.
func (d *devState) alias(rec, ours uint64) uint64 {
	size, ok := d.dev.unaliased[ours]
	if !ok || d.aliases.holds(rec) {
		return rec
	}
	delete(d.dev.unaliased, ours)
	d.aliases.insert(xrange{ours: rec, sim: ours, size: size})
	return ours
}

// inferEmptyCache replays a run of recorded releases that no malloc
// explains as torch.cuda.empty_cache(), before the input e at idx. A
// malloc's releases are followed, past any free_completed entries of its
// synchronisation and further decisions, by its oom, or by its alloc after
// a new segment; releases followed by anything else, or by an alloc served
// from the cache, were empty_cache's. Markers are stepped over: ≈2.4's
// user_defined entries (another thread's record_function range) can fall
// inside a malloc's run, and are no allocator call. e is nil at the end of
// the trace.
func (d *devState) inferEmptyCache(idx int64, e *trace.Event) error {
	h := d.head()
	if h == nil || (h.action != trace.ActionSegmentFree && h.action != trace.ActionSegmentUnmap) {
		return nil
	}
	newSegment := false
	for _, x := range d.expect[d.expectIdx:] {
		if x.action == trace.ActionSegmentAlloc || x.action == trace.ActionSegmentMap {
			newSegment = true
		}
	}
	in := e
	for k := 0; in != nil && (in.Action == trace.ActionFreeCompleted || in.Action == trace.ActionMarker || (in.Action.IsDecision() && in.Action != trace.ActionOOM)); k++ {
		if in.Action == trace.ActionSegmentAlloc || in.Action == trace.ActionSegmentMap {
			newSegment = true
		}
		var err error
		if in, err = d.rp.peek(k); err != nil {
			return err
		}
		for in != nil && in.Device != e.Device {
			k++
			if in, err = d.rp.peek(k); err != nil {
				return err
			}
		}
	}
	if in != nil && (in.Action == trace.ActionOOM || (in.Action == trace.ActionAlloc && newSegment && !d.releasedFit(in))) {
		return nil
	}
	return d.emptyCache()
}

// releasedFit says whether a queued release freed a whole segment that
// would have served the alloc e: a malloc takes a fitting cached block
// before it releases anything, so such releases were empty_cache's.
func (d *devState) releasedFit(e *trace.Event) bool {
	cfg := d.a.Config()
	rounded := d.a.Policy().RoundSize(&cfg, e.Size)
	for _, x := range d.expect[d.expectIdx:] {
		if x.action != trace.ActionSegmentFree || x.stream != e.Stream || x.size < rounded {
			continue
		}
		if (rounded <= allocator.SmallSize) != (x.size == allocator.SmallBuffer) {
			continue // the other pool
		}
		if rounded < cfg.MaxSplitSize && x.size >= cfg.MaxSplitSize {
			continue // oversize blocks serve only oversize requests
		}
		if rounded >= cfg.MaxSplitSize && x.size >= rounded+cfg.MaxNonSplitRoundingSize {
			continue
		}
		return true
	}
	return false
}

// endOfTrace replays a trailing run of releases as empty_cache.
func (d *devState) endOfTrace() error {
	if d.rp.infer && d.head() != nil {
		d.curInput = d.rp.n - 1
		return d.inferEmptyCache(d.rp.n-1, nil)
	}
	return nil
}

func (d *devState) alloc(idx int64, e *trace.Event) (bool, error) {
	if e.Size == 0 {
		return false, d.rp.bad(idx, "alloc of 0 bytes")
	}
	ref, ok := d.live.first(e.Addr)
	if !ok {
		ref = d.live.probe(e.Addr)
	}
	if ref.found {
		return false, d.rp.bad(idx, fmt.Sprintf("alloc at %#x, which is live since event %d", e.Addr, d.live.at(ref).at))
	}
	var b *allocator.Block
	var err error
	if d.rp.opts.TimeMallocs {
		b, err = d.timedMalloc(e.Size, allocator.Stream(e.Stream))
	} else {
		b, err = d.a.Malloc(e.Size, allocator.Stream(e.Stream))
	}
	if err != nil {
		var oom *allocator.OutOfMemoryError
		if !errors.As(err, &oom) {
			return false, fmt.Errorf("replay: event %d: %w", idx, err)
		}
		return d.outOfMemory(idx, e, oom)
	}
	if c := d.rp.check; c != nil {
		c.DecisionsExpected++
		if b.Addr() == d.aliases.translate(e.Addr) {
			c.DecisionsMatched++
		} else {
			d.diverge(idx, fmt.Sprintf("alloc of %d bytes at %#x", e.Size, e.Addr),
				fmt.Sprintf("alloc at %#x", b.Addr()))
		}
	}
	var lb *liveBlock
	if t := &d.live; ref.ver == t.ver && t.n < t.limit {
		s := &t.slots[ref.i] // slot's usual case, written out (see slot)
		s.addr, s.full = e.Addr, true
		t.n++
		t.ver++
		lb = &s.lb
	} else {
		lb = d.live.slot(ref, e.Addr)
	}
	lb.b, lb.stack, lb.trial, lb.at = b, e.Stack, d.trial, idx
	lb.synth, lb.pending, lb.exact = 0, false, false
	if d.failed != nil {
		delete(d.failed, e.Addr)
	}
	if rec := d.rp.opts.Recorder; rec != nil {
		rec.Alloc(d.index, idx, b, e.Stack)
	}
	return false, nil
}

// outOfMemory applies the OOM policy to a failed alloc.
func (d *devState) outOfMemory(idx int64, e *trace.Event, oom *allocator.OutOfMemoryError) (bool, error) {
	res := d.rp.res
	res.OOMs = append(res.OOMs, OOM{Index: idx, Device: d.index, Size: e.Size, Message: oom.Error()})
	if rec := d.rp.opts.Recorder; rec != nil {
		rec.OOM(d.index, idx, oom)
	}
	if c := d.rp.check; c != nil {
		c.DecisionsExpected++
		d.diverge(idx, fmt.Sprintf("alloc of %d bytes at %#x", e.Size, e.Addr), "out of memory")
	}
	switch d.rp.opts.OOM {
	case OOMSkip:
		res.Skipped++
		if d.failed == nil {
			d.failed = map[uint64]struct{}{}
		}
		d.failed[e.Addr] = struct{}{}
		return false, nil
	case OOMDropTrial:
		res.Skipped++
		return false, d.dropTrial(idx)
	default:
		return true, nil
	}
}

// dropTrial frees the current trial's live blocks and skips its remaining
// events.
func (d *devState) dropTrial(idx int64) error {
	var addrs []uint64
	d.live.each(func(addr uint64, lb *liveBlock) {
		if lb.trial == d.trial {
			addrs = append(addrs, addr)
		}
	})
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	for _, addr := range addrs {
		lb, _ := d.live.get(addr)
		d.live.del(addr)
		if lb.pending {
			d.completePrivate(lb.synth)
			continue
		}
		if rec := d.rp.opts.Recorder; rec != nil {
			rec.Free(d.index, idx, lb.b, lb.stack)
		}
		if err := d.a.Free(lb.b); err != nil {
			return fmt.Errorf("replay: event %d: dropping trial: %w", idx, err)
		}
	}
	if err := d.a.ProcessEvents(); err != nil {
		return fmt.Errorf("replay: event %d: dropping trial: %w", idx, err)
	}
	d.skipping, d.fast = true, false
	return nil
}

// recordedOOM replays the request of a malloc that failed in the recording.
func (d *devState) recordedOOM(idx int64, e *trace.Event) error {
	b, err := d.a.Malloc(e.Size, allocator.Stream(e.Stream))
	if err != nil {
		var oom *allocator.OutOfMemoryError
		if !errors.As(err, &oom) {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		d.rp.res.OOMs = append(d.rp.res.OOMs, OOM{Index: idx, Device: d.index, Size: e.Size, Recorded: true, Message: oom.Error()})
		if rec := d.rp.opts.Recorder; rec != nil {
			rec.OOM(d.index, idx, oom)
		}
		return nil
	}
	// The replay had room where the recording did not; the program never
	// got this block, so it goes straight back.
	if err := d.a.Free(b); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	return nil
}

func (d *devState) freeRequested(idx int64, e *trace.Event) error {
	ref, ok := d.live.first(e.Addr)
	if !ok {
		ref = d.live.probe(e.Addr)
	}
	if !ref.found {
		if _, skipped := d.failed[e.Addr]; skipped {
			delete(d.failed, e.Addr)
			d.rp.res.Skipped++
			d.skipCompletion(e)
			return nil
		}
		// Neither allocated by the trace nor explained by the state
		// before it (reconstruct.go): bad input.
		if err := d.rp.bad(idx, fmt.Sprintf("free of unknown address %#x", e.Addr)); err != nil {
			return err
		}
		d.rp.res.UnknownFrees++
		d.skipCompletion(e)
		return nil
	}
	// The block is read in place (a copy of it cost more than the rest
	// of the usual pair's work here); nothing changes the table before
	// the paths that do copy it.
	lp := d.live.at(ref)
	if lp.pending {
		return d.rp.bad(idx, fmt.Sprintf("double free of %#x (freed before, not yet completed)", e.Addr))
	}
	b := lp.b
	if rec := d.rp.opts.Recorder; rec != nil {
		rec.Free(d.index, idx, b, lp.stack)
	}
	if lp.exact {
		lp.pending = true
		if err := d.a.Free(b); err != nil {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		return nil
	}
	rp := d.rp
	var nx *trace.Event
	var err error
	if k := rp.ahead; k < len(rp.buf) { // peekNext, written out (see loop)
		nx = &rp.buf[k]
	} else if nx, err = rp.peek(0); err != nil {
		return err
	}
	pair := nx != nil && nx.Action == trace.ActionFreeCompleted && nx.Device == e.Device && nx.Addr == e.Addr
	if pair && !rp.infer {
		// The usual case: the block returns to its pool at once, and
		// the free_completed, nx = buf[ahead], is consumed (consume,
		// written out).
		d.live.remove(ref, e.Addr)
		if err := d.a.Free(b); err != nil {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		rp.ahead++
		rp.n++
		return nil
	}
	lb := *lp
	if pair && d.rp.infer {
		// Even a free_completed right after its request may be the
		// synchronisation of the next malloc (see completedBySync).
		sync, err := d.completedBySync(e, lb, 1)
		if err != nil {
			return err
		}
		if sync {
			d.rp.consume()
			d.synth++
			lb.synth = allocator.Stream(synthStreamBase + d.synth)
			if err := d.usePrivate(lb.b, lb.synth); err != nil {
				return fmt.Errorf("replay: event %d: %w", idx, err)
			}
			if err := d.a.Free(lb.b); err != nil {
				return fmt.Errorf("replay: event %d: %w", idx, err)
			}
			d.live.remove(ref, e.Addr)
			d.deferred = append(d.deferred, lb.synth)
			return nil
		}
	}
	if pair {
		// The usual case: the block returns to its pool at once.
		d.live.remove(ref, e.Addr)
		if err := d.a.Free(lb.b); err != nil {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		d.rp.consume()
		return nil
	}
	d.synth++
	lb.synth = allocator.Stream(synthStreamBase + d.synth)
	lb.pending = true
	if err := d.usePrivate(lb.b, lb.synth); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	if err := d.a.Free(lb.b); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	d.live.put(ref, e.Addr, lb)
	return nil
}

// recordStream replays Tensor.record_stream from a memreplay recording.
func (d *devState) recordStream(idx int64, e *trace.Event) error {
	ref := d.live.find(e.Addr)
	lb, ok := liveBlock{}, ref.found
	if ok {
		lb = *d.live.at(ref)
	}
	if !ok || lb.pending {
		return d.rp.bad(idx, fmt.Sprintf("record_stream of %#x, which is not allocated", e.Addr))
	}
	if err := d.a.RecordStream(lb.b, allocator.Stream(e.Stream)); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	if in := d.rp.inputs; in != nil {
		in.input(d.index, e)
	}
	lb.exact = true
	d.live.put(ref, e.Addr, lb)
	return nil
}

// skipCompletion consumes the free_completed of a skipped block.
func (d *devState) skipCompletion(e *trace.Event) {
	nx, err := d.rp.peekNext()
	if err == nil && nx != nil && nx.Action == trace.ActionFreeCompleted && nx.Device == e.Device && nx.Addr == e.Addr {
		d.rp.consume()
		d.rp.res.Skipped++
	}
}

func (d *devState) freeCompleted(idx int64, e *trace.Event) error {
	ref := d.live.find(e.Addr)
	if !ref.found {
		if err := d.rp.bad(idx, fmt.Sprintf("free_completed of unknown address %#x", e.Addr)); err != nil {
			return err
		}
		d.rp.res.UnknownFrees++
		return nil
	}
	lb := *d.live.at(ref)
	if !lb.pending {
		if lb.at >= 0 {
			return d.rp.bad(idx, fmt.Sprintf("free_completed of %#x, which was not freed", e.Addr))
		}
		// A block restored as live whose free request fell before the
		// trace began.
		if rec := d.rp.opts.Recorder; rec != nil {
			rec.Free(d.index, idx, lb.b, lb.stack)
		}
		d.live.remove(ref, e.Addr)
		if err := d.a.Free(lb.b); err != nil {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		return nil
	}
	d.live.remove(ref, e.Addr)
	if lb.exact {
		// The recording allocator returned the block here. Its streams'
		// events may have completed (a stream_sync before): return it now
		// too, as a malloc would first thing. Otherwise the allocator
		// waits for them itself (a malloc's synchronisation, empty_cache).
		if err := d.a.ProcessEvents(); err != nil {
			return fmt.Errorf("replay: event %d: %w", idx, err)
		}
		return nil
	}
	sync := false
	if d.rp.infer {
		var err error
		if sync, err = d.completedBySync(e, lb, 0); err != nil {
			return err
		}
	}
	if sync {
		d.deferred = append(d.deferred, lb.synth)
		return nil
	}
	d.completePrivate(lb.synth)
	if err := d.a.ProcessEvents(); err != nil {
		return fmt.Errorf("replay: event %d: %w", idx, err)
	}
	return nil
}

// completedBySync decides whether the recorded free_completed e came from
// PyTorch's synchronize_and_free_events (malloc's last resort, or
// empty_cache) rather than from process_events at the start of a malloc. The
// trace does not say; the replay must know, because a block that process_events
// returned is free before the malloc searches its pool, while one returned by
// the synchronisation becomes free only after the cache was (partly)
// released. The evidence, looking past the run of free_completed entries:
//
//   - releases already queued for this malloc: release_available_cached_blocks
//     ran before the synchronisation;
//   - an oom or empty_cache next: a synchronisation (had process_events
//     freed a block that fits, the malloc would not have failed; had none
//     fitted, both orders decide the same);
//   - releases next: with max_split_size unlimited and no GC the release
//     path frees every free segment either way, so only a block that would
//     have served the request tells (it must have been pending); with
//     max_split_size or GC, process_events unless such a block exists.
//
// A new segment next means process_events: after a synchronisation that
// released nothing cudaMalloc would fail again.
func (d *devState) completedBySync(e *trace.Event, lb liveBlock, from int) (bool, error) {
	for _, x := range d.expect[d.expectIdx:] {
		if x.action == trace.ActionSegmentFree || x.action == trace.ActionSegmentUnmap {
			return true, nil
		}
	}
	var next *trace.Event
	k := from
	for ; ; k++ {
		nx, err := d.rp.peek(k)
		if err != nil {
			return false, err
		}
		if nx == nil {
			return false, nil
		}
		if nx.Device != e.Device || nx.Action == trace.ActionFreeCompleted {
			continue
		}
		next = nx
		break
	}
	switch next.Action {
	case trace.ActionOOM, trace.ActionEmptyCache:
		return true, nil
	case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
	default:
		return false, nil
	}
	// Find the request the malloc serves.
	for j := k; j < k+4096; j++ {
		nx, err := d.rp.peek(j)
		if err != nil || nx == nil {
			return false, err
		}
		if nx.Device != e.Device {
			continue
		}
		var rounded uint64
		switch nx.Action {
		case trace.ActionOOM:
			rounded = nx.Size
		case trace.ActionAlloc:
			cfg := d.a.Config()
			rounded = d.a.Policy().RoundSize(&cfg, nx.Size)
		case trace.ActionFreeCompleted, trace.ActionSegmentAlloc, trace.ActionSegmentFree,
			trace.ActionSegmentMap, trace.ActionSegmentUnmap:
			continue
		default:
			return false, nil
		}
		small := rounded <= allocator.SmallSize
		return lb.b.Size() >= rounded && uint64(lb.b.Stream()) == nx.Stream &&
			(lb.b.Size() <= allocator.SmallSize) == small, nil
	}
	return false, nil
}

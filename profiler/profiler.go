package profiler

import (
	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// Options tune a Profiler; the zero value gives the defaults.
type Options struct {
	// MaxSamples caps the timeline (default 1000; at least 2).
	MaxSamples int
	// MaxOOMs caps the OOM snapshots kept (default 1000), and the retry
	// events; the rest are counted.
	MaxOOMs int
	// MaxAnnotations caps the record_function annotations listed
	// (Profile.Markers; default 1000): the trace's Annotations and the
	// markers of their shape, the earliest first; the rest are counted.
	// No other marker counts against it.
	MaxAnnotations int
	// OOMCaptures is how many OOMs also get a full capture with sites
	// (default 8; negative: none).
	OOMCaptures int
	// ExpectedEvents, when the caller knows the trace's length (a trace
	// read whole), sets the timeline's interval from the start: each sample
	// reads the allocator's free blocks, and the doubling that an unknown
	// length needs takes about MaxSamples/2 samples more per doubling.
	ExpectedEvents int64
	// EventBounds, when set and ExpectedEvents is not, bounds the trace's
	// length while it is still being imported (sim/replay's speculative
	// replay) and gives it once known: the profile is then the one
	// ExpectedEvents set to that length gives, sample for sample (see
	// length.go).
	EventBounds LengthBounds
	// DetailEvents, when positive, also keeps the state after every event
	// for a window of this many events around the peak of live bytes
	// (Profile.PeakDetail; see detail.go), for a one-device replay.
	DetailEvents int
}

// Profiler records a replay; see the package comment. Create one with New,
// pass it as replay.Options.Recorder, and call Finish after the replay.
type Profiler struct {
	stacks *trace.Stacks
	opts   Options

	devs  []*devState // indexed by device ordinal; nil for unused ones
	order []*devState // in Attach order

	total counters
	// cur is the index of the event being replayed: observer entries carry
	// none, so peaks of reserved bytes are dated with it.
	cur    int64
	events int64

	anySync bool // some device's reserved bytes must be read from its Stats
	// stepWork: Step has more to do than keep the index and time and
	// sample (anySync, retryCheck or detail), tested once per event.
	stepWork bool
	// open is the device whose last Free has not been seen to complete
	// yet (see devState.lastFree).
	open *devState
	// pos is the replay's position under GateSteps (nil when every event
	// is stepped); due the least index whose Step the replay must call:
	// nextSample, or -1 while stepWork or open is set. Whatever sets one
	// of those lowers due with it (a Step then comes at the end of the
	// event, as it always did); Step raises it again.
	pos *replay.Position
	due int64

	// totalPending: the state at the total peak is still to be
	// reconstructed, from every device's log since its totalMark.
	totalPending bool
	totalPeak    *Capture

	every      int64 // timeline interval
	nextSample int64
	timeline   []Sample
	// timelineGiven: a profile from Finish holds the timeline itself, so
	// the next sample copies it first (Finish does not copy it: a replay
	// is over when it is called).
	timelineGiven bool
	// timelineCap is the timeline's expected length, from ExpectedEvents.
	timelineCap int
	// While the length is not known (Options.EventBounds; length.go):
	// bounds is where it comes from, fine the samples taken at every
	// event where the timeline of a length within the bounds samples.
	// Once it is known, carry is what the samples after the last one
	// kept saw (their interval maxima), for the next sample. The fine
	// samples are kept in chunks (half a million for a 1 GB snapshot:
	// a slice that doubled would copy them and hold twice their bytes).
	bounds   LengthBounds
	fine     [][]Sample
	carry    Sample
	hasCarry bool

	detail *detail // nil unless Options.DetailEvents

	ooms        []OOMSnapshot
	oomsDropped int64
	// lastTime is the latest recorded event time (Sample.TimeUS).
	lastTime int64
	// retryCheck: some device released segments or failed a malloc in
	// this event, so its retry count may have changed (see Step).
	retryCheck     bool
	retries        []Retry
	retriesDropped int64
	// marks are the record_function annotations: the trace's markers of
	// their shape and its Annotations (markers.go).
	marks       marks
	oomCaptures int
	ncap        int // reconstructions made (tests)
}

// counters are the incremental figures of one device or of the total.
type counters struct {
	live, requested, reserved uint64

	peakLive, peakReserved           uint64
	peakLiveEvent, peakReservedEvent int64
	// at the peak of live bytes
	reservedAtPeak, requestedAtPeak uint64

	maxInternal uint64
	// interval maxima for the timeline
	winLive, winReserved uint64

	allocs, frees uint64
	// maxFrag is the largest external fragmentation seen at a sample, a
	// capture or an OOM.
	maxFrag float64
}

func (c *counters) noteFrag(f float64) { c.maxFrag = max(c.maxFrag, f) }

func (c *counters) addLive(size, req uint64, index int64) (newPeak bool) {
	c.live += size
	c.requested += req
	if c.live > c.winLive {
		c.winLive = c.live
	}
	if c.live > c.requested {
		if iw := c.live - c.requested; iw > c.maxInternal {
			c.maxInternal = iw
		}
	}
	if c.live > c.peakLive {
		c.peakLive = c.live
		c.peakLiveEvent = index
		c.reservedAtPeak = c.reserved
		c.requestedAtPeak = c.requested
		return true
	}
	return false
}

func (c *counters) subLive(size, req uint64) {
	c.live = sub(c.live, size)
	c.requested = sub(c.requested, req)
	c.frees++
}

func (c *counters) addReserved(n uint64, index int64) {
	c.reserved += n
	c.noteReserved(index)
}

func (c *counters) noteReserved(index int64) {
	if c.reserved > c.winReserved {
		c.winReserved = c.reserved
	}
	if c.reserved > c.peakReserved {
		c.peakReserved = c.reserved
		c.peakReservedEvent = index
	}
}

// sub subtracts without wrapping: a free the profiler never saw allocated
// must not turn the figures into 2^64.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// The undo log: what changed a device's blocks and segments since a peak
// whose state is still to be reconstructed (see capture.go).
type logKind uint8

const (
	logAlloc    logKind = iota // a block was allocated at addr
	logFree                    // the block at addr (size, stack) was freed
	logComplete                // the pending block at addr (size) returned to its pool
	logSegAlloc                // a segment [addr, addr+size) was obtained
	logSegFree                 // ... released
	logMap                     // expandable pages [addr, addr+size) were mapped
	logUnmap                   // ... unmapped
)

type logEntry struct {
	kind   logKind
	stack  trace.StackID
	addr   uint64
	size   uint64
	stream uint64
}

// devState is one device's recorder state.
type devState struct {
	p     *Profiler
	index int32
	a     *allocator.Allocator
	proc  replay.Process
	// baseline is proc's device calls when the restore ended.
	baseline gpu.Counters

	counters
	sites []siteCounters // indexed by StackID
	addrs addrTable      // live block address -> site

	hookWork       // what the next hook must do first besides keeping the index
	obsNet   int64 // net reserved change the observer saw while syncPending

	// log holds the changes since the oldest pending peak: ownMark and
	// totalMark are where the device's own and the total's pending peaks
	// begin in it (-1: none pending).
	log                []logEntry
	ownMark, totalMark int
	peak               *Capture

	// lastFree is the block of the last Free: if the allocator does not
	// report its return to the pool (free_completed) before anything else
	// happens, it waits for record-stream events, and pendingFree keeps
	// its size until it returns.
	lastFree struct {
		addr, size uint64
		stream     allocator.Stream
	}
	lastFreeOpen bool
	pendingFree  map[uint64]uint64
	// watch: free_completed is observed (after a record_stream; see
	// observed).
	watch bool

	// retries is the allocator's num_alloc_retries when last read;
	// retryCheck asks Step to read it again.
	retries    int64
	retryCheck bool
}

func (d *devState) logging() bool { return d.ownMark >= 0 || d.totalMark >= 0 }

func (d *devState) append(e logEntry) {
	if d.logging() {
		d.log = append(d.log, e)
	}
}

// hookWork is a device's work for the next hook, tested as one (settle).
type hookWork struct {
	syncPending bool // reserved must be read from Stats (restored segments)
	// wantWatch: a record_stream was seen, free_completed is observed
	// from the next hook on (see observed).
	wantWatch bool
}

// siteCounters are one site's figures on one device.
type siteCounters struct {
	live, maxLive      uint64
	allocs, allocBytes uint64
}

// New returns a profiler. stacks resolves the StackIDs the replay passes
// (the trace reader's table); it may be nil.
func New(stacks *trace.Stacks, opts Options) *Profiler {
	if opts.MaxSamples <= 0 {
		opts.MaxSamples = 1000
	}
	if opts.MaxSamples < 4 {
		opts.MaxSamples = 4
	}
	if opts.MaxSamples%2 == 1 {
		// Samples merge in pairs when the timeline is full.
		opts.MaxSamples++
	}
	if opts.MaxOOMs <= 0 {
		opts.MaxOOMs = 1000
	}
	if opts.MaxAnnotations <= 0 {
		opts.MaxAnnotations = 1000
	}
	if opts.OOMCaptures == 0 {
		opts.OOMCaptures = 8
	}
	p := &Profiler{stacks: stacks, opts: opts, every: 1,
		total: counters{peakLiveEvent: -1, peakReservedEvent: -1}}
	if opts.DetailEvents > 0 {
		p.detail = newDetail(opts.DetailEvents, opts.ExpectedEvents)
		p.stepWork = true
		p.due = -1
	}
	if n := opts.ExpectedEvents; n > 0 {
		p.spaceFor(n)
		p.nextSample = p.every - 1
	} else if opts.EventBounds != nil {
		p.bounds = opts.EventBounds
		p.nextSample = p.nextFine(-1)
	}
	return p
}

// spaceFor sets the timeline's interval for a trace of n > 0 events.
func (p *Profiler) spaceFor(n int64) {
	// The timeline is thinned when it reaches MaxSamples, so aim below,
	// the final partial interval included.
	m := int64(p.opts.MaxSamples - 2)
	p.every = max(1, (n+m-1)/m)
	// One sample an interval and the last event's: sized once (at the
	// first sample, so that a profile without samples still has a nil
	// timeline), the timeline is not copied as it grows.
	p.timelineCap = int(min(int64(p.opts.MaxSamples), n/p.every+2))
}

// dev returns the state of an attached device, or nil.
func (p *Profiler) dev(device int32) *devState {
	if device < 0 || int(device) >= len(p.devs) {
		return nil
	}
	return p.devs[device]
}

// Restored implements replay.Recorder: the device calls counted so far
// rebuilt the state before the trace, and the report leaves them out.
func (p *Profiler) Restored(device int32) {
	if device >= 0 && int(device) < len(p.devs) && p.devs[device] != nil && p.devs[device].proc != nil {
		d := p.devs[device]
		d.baseline = d.proc.Counters()
	}
	if d := p.dev(device); d != nil {
		if d.wantWatch {
			p.watchCompletions(d)
		}
	}
}

// Attach implements replay.Recorder: it registers the observer that keeps
// reserved bytes and the undo log.
func (p *Profiler) Attach(device int32, a *allocator.Allocator, proc replay.Process) {
	if device < 0 {
		return
	}
	for int(device) >= len(p.devs) {
		p.devs = append(p.devs, nil)
	}
	d := &devState{p: p, index: device, a: a, proc: proc, ownMark: -1, totalMark: -1,
		counters: counters{peakLiveEvent: -1, peakReservedEvent: -1}}
	if p.totalPending {
		// The total's peak was before this device existed: its state
		// then was empty, and everything from now on is to be undone.
		d.totalMark = 0
	}
	d.retries = a.Stats().NumAllocRetries
	p.devs[device] = d
	p.order = append(p.order, d)
	// Alloc and free_requested are reported by Alloc and Free, and an
	// oom changes nothing the profiler keeps: observing only the rest
	// spares the replay two calls per alloc and free (issue 19).
	a.AddObserverFor(observed, d.observe)
	// Segments restored before the first event, or any that exist
	// already, emit no observer entries.
	d.syncPending = true
	p.anySync, p.stepWork, p.due = true, true, -1
}

// observed are the actions observe acts on. An alloc is reported by
// Alloc (one the replay does not report, a recorded OOM's request that
// succeeded here, is freed within the event), a free request by Free.
//
// free_completed is observed only once a device has seen a record_stream
// (watchCompletions). The allocator defers a free only for a block used on
// another stream (RecordStream), so until then every Free's block returns
// to its pool within the free, and there is nothing to watch: observing it
// cost an observer call per freed block, about a sixth of the profiler's
// work per replayed event (issue 19). The record_stream entry says when to
// start: the replay records a stream use either as an event of its own,
// with a Step after it, or on a block whose Free the profiler has just
// been told of (a free the trace completes later: RecordStream then the
// allocator's Free, within the hook's event); that block is then taken
// as open (see lastFree), and the next hook starts watching. In both
// cases the deferred free cannot complete before that hook: its event
// completes only at a later trace event (Process.CompleteEvents) or a
// synchronising call, and the replay makes none in between.
var observed = allocator.Actions(allocator.ActionSegmentAlloc, allocator.ActionSegmentMap,
	allocator.ActionSegmentFree, allocator.ActionSegmentUnmap, allocator.ActionRecordStream)

// watchCompletions starts observing the device's free_completed entries.
// It runs in a hook, outside the allocator's lock.
func (p *Profiler) watchCompletions(d *devState) {
	d.wantWatch = false
	if d.watch {
		return
	}
	d.watch = true
	d.a.AddObserverFor(allocator.Actions(allocator.ActionFreeCompleted), func(e allocator.TraceEntry) {
		// The usual entry, the last Free's block returned to its pool
		// at once, is settled here: a method value would add a call
		// that copies the entry again.
		if d.lastFreeOpen && e.Addr == d.lastFree.addr {
			d.lastFreeOpen = false
			if p.open == d {
				p.open = nil
			}
			return
		}
		d.observe(e)
	})
}

// observe runs under the allocator's lock: it must not call back into the
// allocator.
func (d *devState) observe(e allocator.TraceEntry) {
	p := d.p
	switch e.Action {
	case allocator.ActionRecordStream:
		if d.watch {
			return
		}
		d.wantWatch, p.stepWork, p.due = true, true, -1
		if e.Addr == d.lastFree.addr && e.Stream != d.lastFree.stream {
			// The block of the Free just reported is now used on
			// another stream: its free waits (see observed).
			d.lastFreeOpen = true
			p.open = d
		}
	case allocator.ActionFreeCompleted:
		if d.lastFreeOpen && e.Addr == d.lastFree.addr {
			d.lastFreeOpen = false // returned at once: the usual case
			if p.open == d {
				p.open = nil
			}
			return
		}
		if size, ok := d.pendingFree[e.Addr]; ok {
			delete(d.pendingFree, e.Addr)
			d.append(logEntry{kind: logComplete, addr: e.Addr, size: size})
		}
	case allocator.ActionSegmentAlloc, allocator.ActionSegmentMap:
		d.closeFree()
		now := p.now()
		d.addReserved(e.Size, now)
		p.total.addReserved(e.Size, now)
		if d.syncPending {
			d.obsNet += int64(e.Size)
		}
		k := logSegAlloc
		if e.Action == allocator.ActionSegmentMap {
			k = logMap
		}
		d.append(logEntry{kind: k, addr: e.Addr, size: e.Size, stream: uint64(e.Stream)})
	case allocator.ActionSegmentFree, allocator.ActionSegmentUnmap:
		// A retry follows the release of the whole cache; the count is
		// read after the event (the observer may not call the allocator).
		d.retryCheck, p.retryCheck, p.stepWork, p.due = true, true, true, -1
		d.closeFree()
		d.reserved = sub(d.reserved, e.Size)
		p.total.reserved = sub(p.total.reserved, e.Size)
		if d.syncPending {
			d.obsNet -= int64(e.Size)
		}
		k := logSegFree
		if e.Action == allocator.ActionSegmentUnmap {
			k = logUnmap
		}
		d.append(logEntry{kind: k, addr: e.Addr, size: e.Size, stream: uint64(e.Stream)})
	}
}

// closeFree settles the last Free: it was not returned to its pool at
// once, so it waits for record-stream events.
func (d *devState) closeFree() {
	if !d.lastFreeOpen {
		return
	}
	d.lastFreeOpen = false
	if d.p.open == d {
		d.p.open = nil
	}
	if d.pendingFree == nil {
		d.pendingFree = map[uint64]uint64{}
	}
	d.pendingFree[d.lastFree.addr] = d.lastFree.size
}

// syncReserved resets reserved bytes from the allocator's statistics. What
// the observer has not seen came from Restore, before the first event, so
// it is dated -1; what the observer saw during this first event (obsNet) is
// dated now.
func (p *Profiler) syncReserved(d *devState) {
	st := d.a.Stats()
	cur := max(st.ReservedBytes[allocator.StatAll].Current, 0)
	restored := uint64(max(cur-d.obsNet, 0))
	d.setReserved(restored)
	d.noteReserved(-1)
	p.total.noteReserved(-1)
	d.setReserved(uint64(cur))
	now := p.now()
	d.noteReserved(now)
	p.total.noteReserved(now)
}

// setReserved sets a device's reserved bytes and the total with them.
func (d *devState) setReserved(r uint64) {
	d.p.total.reserved = sub(d.p.total.reserved, d.reserved) + r
	d.reserved = r
}

// settle is the work every hook does first. Small enough to inline: in
// the usual hook no free is open, the device is in sync and the event is
// the trace's, and only the event's index is kept.
func (p *Profiler) settle(d *devState, index int64) {
	if p.open == nil && index >= 0 && d.hookWork == (hookWork{}) {
		p.cur = index
		return
	}
	p.settleSlow(d, index)
}

func (p *Profiler) settleSlow(d *devState, index int64) {
	if p.open != nil {
		p.open.closeFree()
	}
	if d.wantWatch {
		p.watchCompletions(d)
	}
	if index >= 0 {
		p.cur = index
		if d.syncPending {
			p.syncReserved(d)
			d.syncPending = false
		}
	}
}

// Alloc implements replay.Recorder.
func (p *Profiler) Alloc(device int32, index int64, b *allocator.Block, stack trace.StackID) {
	d := p.dev(device)
	if d == nil {
		return
	}
	p.settle(d, index)
	if index < 0 {
		// A restored block: its segment came from Restore, which the
		// observer did not see. Later restored segments may hold no live
		// block, so the first event reads the statistics again.
		p.syncReserved(d)
	}
	size, req, addr := b.Size(), b.RequestedSize(), b.Addr()
	if addr == d.lastFree.addr {
		// A stream use at this address is now this block's (observe).
		d.lastFree.addr = 0
	}
	d.addrs.put(addr, stack)
	if int(stack) >= len(d.sites) {
		d.growSites(stack)
	}
	s := &d.sites[stack]
	s.live += size
	if index >= 0 {
		// Restored blocks were allocated before the trace began.
		s.allocs++
		s.allocBytes += size
		d.allocs++
		p.total.allocs++
	}
	if s.live > s.maxLive {
		s.maxLive = s.live
	}
	// A pending peak that this allocation does not replace came before
	// it: the reconstruction undoes it. (Marks set below start after it.)
	if d.logging() {
		d.log = append(d.log, logEntry{kind: logAlloc, addr: addr})
	}
	newOwn := d.addLive(size, req, index)
	newTotal := p.total.addLive(size, req, index)
	if newOwn {
		d.ownMark = len(d.log)
	}
	if newTotal {
		p.totalPending = true
		for _, o := range p.order {
			o.totalMark = len(o.log)
		}
	}
	if newOwn || newTotal {
		d.trim()
	} else {
		p.checkLog(d)
	}
}

func (d *devState) growSites(stack trace.StackID) {
	n := max(2*len(d.sites), int(stack)+1, 64)
	ns := make([]siteCounters, n)
	copy(ns, d.sites)
	d.sites = ns
}

// Free implements replay.Recorder. It runs before the block is freed.
func (p *Profiler) Free(device int32, index int64, b *allocator.Block, stack trace.StackID) {
	d := p.dev(device)
	if d == nil {
		return
	}
	p.settle(d, index)
	size, req, addr := b.Size(), b.RequestedSize(), b.Addr()
	if d.logging() {
		d.log = append(d.log, logEntry{kind: logFree, addr: addr, size: size, stack: stack})
	}
	d.subLive(size, req)
	p.total.subLive(size, req)
	d.addrs.del(addr)
	if int(stack) < len(d.sites) {
		s := &d.sites[stack]
		s.live = sub(s.live, size)
	}
	d.lastFree.addr, d.lastFree.size = addr, size
	if d.watch {
		d.lastFreeOpen = true
		p.open, p.due = d, -1
	} else {
		// Returned to its pool within the free, unless the replay
		// records a stream use on it first (observe): lastFree is kept
		// until the next Alloc of its address, the first that a
		// stream use of another block there can follow.
		d.lastFree.stream = b.Stream()
	}
	p.checkLog(d)
}

// checkLog bounds a log: once it is longer than the state it would be
// undone from, reconstructing now costs no more than undoing later, and
// logging stops. It inlines to one test where no peak is pending, the
// usual hook once the peak is behind.
func (p *Profiler) checkLog(d *devState) {
	if d.logging() {
		p.checkLogSlow(d)
	}
}

func (p *Profiler) checkLogSlow(d *devState) {
	limit := 4096 + 2*d.addrs.len()
	if d.ownMark >= 0 && len(d.log)-d.ownMark > limit {
		p.takeOwn(d)
	}
	if d.totalMark >= 0 && len(d.log)-d.totalMark > limit {
		p.takeTotal()
	}
}

// takeOwn reconstructs the state at the device's pending peak.
func (p *Profiler) takeOwn(d *devState) {
	if p.totalPending && len(p.order) == 1 && d.totalMark == d.ownMark {
		// One device: its peak and the total's are the same moment.
		p.takeTotal()
		return
	}
	d.peak = p.reconstruct([]*devState{d}, []int{d.ownMark}, d.peakLiveEvent, d.peakLive, d.requestedAtPeak, d.reservedAtPeak)
	d.ownMark = -1
	d.trim()
}

// takeTotal reconstructs the state at the total's pending peak on every
// device.
func (p *Profiler) takeTotal() {
	marks := make([]int, len(p.order))
	for i, o := range p.order {
		marks[i] = o.totalMark
	}
	c := &p.total
	p.totalPeak = p.reconstruct(p.order, marks, c.peakLiveEvent, c.peakLive, c.requestedAtPeak, c.reservedAtPeak)
	p.totalPending = false
	for _, o := range p.order {
		if len(p.order) == 1 && o.ownMark == o.totalMark && o.ownMark >= 0 {
			o.peak, o.ownMark = p.totalPeak, -1
		}
		o.totalMark = -1
		o.trim()
	}
}

// trim drops the log entries no pending peak needs.
func (d *devState) trim() {
	keep := len(d.log)
	if d.ownMark >= 0 {
		keep = min(keep, d.ownMark)
	}
	if d.totalMark >= 0 {
		keep = min(keep, d.totalMark)
	}
	if keep == 0 {
		return
	}
	n := copy(d.log, d.log[keep:])
	d.log = d.log[:n]
	if d.ownMark >= 0 {
		d.ownMark -= keep
	}
	if d.totalMark >= 0 {
		d.totalMark -= keep
	}
}

// OOM implements replay.Recorder.
func (p *Profiler) OOM(device int32, index int64, err *allocator.OutOfMemoryError) {
	d := p.dev(device)
	if d == nil || err == nil {
		return
	}
	p.settle(d, index)
	// A failed retry releases nothing when nothing was cached.
	d.retryCheck, p.retryCheck, p.stepWork, p.due = true, true, true, -1
	if len(p.ooms) >= p.opts.MaxOOMs {
		p.oomsDropped++
		return
	}
	free, largest := d.a.FreeSummary()
	o := OOMSnapshot{
		Event: index, Device: device,
		RequestedBytes: err.Requested, RoundedBytes: err.Rounded, AllocBytes: err.AllocSize,
		LiveBytes: d.live, ReservedBytes: err.Reserved,
		FreeBytes: free, LargestFreeBlockBytes: largest, ExternalFragmentation: fragmentation(free, largest),
		DeviceFreeBytes: err.DeviceFree, DeviceTotalBytes: err.DeviceTotal,
	}
	d.noteFrag(o.ExternalFragmentation)
	if len(p.order) == 1 {
		p.total.noteFrag(o.ExternalFragmentation)
	}
	if p.oomCaptures < p.opts.OOMCaptures {
		p.oomCaptures++
		// The state now: nothing to undo.
		o.Capture = p.reconstruct([]*devState{d}, []int{len(d.log)}, index, d.live, d.requested, err.Reserved)
	}
	p.ooms = append(p.ooms, o)
}

// Step implements replay.Recorder. It runs after every event: the usual
// one leaves no free open, no device to sync, no retry to read, keeps no
// detail and takes no sample, and costs three tests after the event's
// index and time are kept.
func (p *Profiler) Step(index int64, e *trace.Event) {
	if index >= p.events {
		p.events = index + 1
	}
	p.cur = index + 1
	if e != nil && e.TimeUS != 0 {
		p.lastTime = e.TimeUS
	}
	if p.open == nil && !p.stepWork && index < p.nextSample {
		p.due = p.nextSample
		return
	}
	p.stepSlow(index)
}

// GateSteps implements replay.StepGate: the replay calls Step only from
// index due on, and keeps the index and the latest time in pos, which
// the profiler reads instead (now, stepSlow, Finish). Step has work only
// at a sample or after an event that left some (stepWork, open), so most
// events need no call (issue 19).
func (p *Profiler) GateSteps(pos *replay.Position) (due *int64) {
	p.pos, p.due = pos, -1
	return &p.due
}

// now is the index that dates an observer's entry: the event being
// replayed. cur is set by every Step and hook; under GateSteps the
// replay's position is later when the events since the last Step or hook
// had none (both only grow, so the later is the larger).
func (p *Profiler) now() int64 {
	if p.pos != nil {
		return max(p.cur, p.pos.Next)
	}
	return p.cur
}

// syncPos takes what the replay's position holds that the Steps the
// replay did not call would have kept.
func (p *Profiler) syncPos() {
	if p.pos != nil {
		p.events = max(p.events, p.pos.Next)
		p.cur = max(p.cur, p.pos.Next)
		p.lastTime = p.pos.TimeUS
	}
}

// stepSlow is the rest of Step, in its order (the time is kept first: none
// of closeFree and syncReserved reads it).
func (p *Profiler) stepSlow(index int64) {
	p.syncPos()
	if p.open != nil {
		p.open.closeFree()
	}
	if p.anySync {
		for _, d := range p.order {
			if d.syncPending {
				p.syncReserved(d)
				d.syncPending = false
			}
		}
		p.anySync = false
	}
	for _, d := range p.order {
		if d.wantWatch {
			p.watchCompletions(d)
		}
	}
	if p.retryCheck {
		p.readRetries(index)
	}
	if p.detail != nil {
		p.detail.step(index, p.lastTime, &p.total)
	}
	p.stepWork = p.detail != nil
	if index >= p.nextSample {
		p.sample(index)
	}
	p.due = p.nextSample
	if p.stepWork || p.open != nil {
		p.due = -1
	}
}

// readRetries dates the retries of the event at index. The allocator
// retries a device allocation only after releasing its whole cache
// (segment_free or segment_unmap entries), and a retry that releases
// nothing fails (an OOM), so reading the counter after those events alone
// finds every retry without reading statistics at every event.
func (p *Profiler) readRetries(index int64) {
	p.retryCheck = false
	for _, d := range p.order {
		if !d.retryCheck {
			continue
		}
		d.retryCheck = false
		n := d.a.Stats().NumAllocRetries
		if n <= d.retries {
			continue
		}
		if len(p.retries) < p.opts.MaxOOMs {
			p.retries = append(p.retries, Retry{Event: index, Device: d.index, Count: n - d.retries})
		} else {
			p.retriesDropped++
		}
		d.retries = n
	}
}

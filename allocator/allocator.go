package allocator

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/memreplay/memreplay/allocator/config"
)

// Allocator is PyTorch's DeviceCachingAllocator for one device.
type Allocator struct {
	mu      sync.Mutex
	single  bool // WithoutLocking: the caller serialises every call; mu is never taken
	dev     Device
	vm      VirtualMemory // nil when the device has no VMM support
	device  int
	cfg     config.Config
	policy  Policy
	pytorch bool // policy is PyTorch{}: its methods are called directly
	check   bool // run CheckInvariants after every operation
	// coldFree makes every free set put each block in its bucket at
	// once, keeping no hot blocks (freeset.go): the tests compare the two.
	coldFree bool

	small, large pool
	stats        Stats

	// What a policy other than PyTorch switched on at New (policy.go):
	// pools lists the pools in use, large first; life and stitch are nil
	// under PyTorch.
	pools                []*pool
	longSmall, longLarge pool
	life                 *lifetimeState
	stitch               *stitchState
	plan                 *planState

	// totalAllocated is the bytes obtained from the device: segments plus
	// mapped pages. The memory fraction and GC compare against it.
	totalAllocated uint64
	setFraction    bool
	allowedMax     uint64
	deviceTotal    uint64 // totalGlobalMem, read once at construction

	segments []*segment

	events        map[Stream]*eventQueue
	eventStreams  []Stream // streams with queued events, sorted
	pendingEvents int

	observers      []observerEntry
	observed       ActionSet // the union of the observers' sets
	nextObserverID int

	fatal         error // a sticky device error; every later call returns it
	oversizeDrift bool  // max_split_size changed at run time: oversize stats are PyTorch's, not recomputable

	accumulatedReset bool     // ResetAccumulatedStats was called: allocated - freed no longer equals current
	spare            []*Block // recycled block objects
	blocks           slab[Block]
	segs             slab[segment]
}

// pool is a BlockPool: the free set and the unmapped ranges of one size
// class.
type pool struct {
	small    bool
	long     bool // Lifetime's pool of long-lived blocks
	statIdx  int
	free     freeSet
	unmapped unmappedSet
	// getFreeBlocksCallCount is the GC clock: it advances on every
	// get_free_block while GC is active.
	getFreeBlocksCallCount uint64
}

// Option configures New.
type Option func(*Allocator)

// WithDeviceIndex sets the device ordinal reported in messages and
// snapshots (default 0).
func WithDeviceIndex(i int) Option { return func(a *Allocator) { a.device = i } }

// WithPolicy replaces PyTorch's size policy.
func WithPolicy(p Policy) Option { return func(a *Allocator) { a.policy = p } }

// WithInvariantChecks makes every operation verify the allocator's
// invariants afterwards and panic on a violation. For tests: it costs a walk
// over all blocks per call.
func WithInvariantChecks() Option { return func(a *Allocator) { a.check = true } }

// WithoutLocking is for an allocator that one goroutine owns, or whose
// caller already serialises every call with its own lock (a replay, a
// simulated worker): its methods then take no lock of their own. An
// uncontended mutex still costs two atomic instructions per Malloc and per
// Free, a few percent of a replay that does little else. Calls from two
// goroutines at once without the caller's own lock are then a data race.
func WithoutLocking() Option { return func(a *Allocator) { a.single = true } }

// lock takes the allocator's lock unless WithoutLocking said the caller
// serialises the calls; it says whether it took it (then the caller
// defers the unlock).
func (a *Allocator) lock() bool {
	if a.single {
		return false
	}
	a.mu.Lock()
	return true
}

// New returns an allocator for dev with the given settings.
func New(dev Device, cfg config.Config, opts ...Option) (*Allocator, error) {
	a := &Allocator{
		dev:    dev,
		policy: PyTorch{},
		small:  pool{small: true, statIdx: StatSmall},
		large:  pool{statIdx: StatLarge},
		events: make(map[Stream]*eventQueue),
	}
	a.blocks.pool, a.segs.pool = &blockChunks, &segmentChunks
	a.vm, _ = dev.(VirtualMemory)
	for _, o := range opts {
		o(a)
	}
	_, a.pytorch = a.policy.(PyTorch)
	a.small.free, a.large.free = a.newFreeSet(), a.newFreeSet()
	a.pools = []*pool{&a.large, &a.small}
	if e, ok := a.policy.(policyEngine); ok {
		if err := e.engine(a, &cfg); err != nil {
			return nil, err
		}
	}
	if err := a.validate(&cfg); err != nil {
		return nil, err
	}
	a.cfg = cfg
	_, total, err := dev.MemGetInfo()
	if err != nil {
		return nil, fmt.Errorf("allocator: reading device memory: %w", err)
	}
	a.deviceTotal = total
	if cfg.MaxSplitSize > math.MaxInt64 {
		a.stats.MaxSplitSize = -1
	} else {
		a.stats.MaxSplitSize = int64(cfg.MaxSplitSize)
	}
	if cfg.PerProcessMemoryFraction < 1 {
		if err := a.setMemoryFraction(cfg.PerProcessMemoryFraction); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// The Block and segment chunks of discarded allocators (slab.go).
var (
	blockChunks   chunkPool[Block]
	segmentChunks chunkPool[segment]
)

// Discard ends the allocator's life, as a process exit ends its caching
// allocator's: the memory of its Blocks, segments and free-set nodes goes
// to the allocators made after it. The caller promises to use no *Block the allocator returned after
// this; the allocator itself returns ErrDiscarded from every later
// Malloc, Free, ProcessEvents and EmptyCache. The device memory it holds is
// the caller's to release (its process's exit). Calling Discard is never
// needed: it spares the collector the blocks of a simulation that starts
// process after process (sim/workers).
func (a *Allocator) Discard() {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if a.fatal == ErrDiscarded {
		return
	}
	a.fatal = ErrDiscarded
	// Nothing of the allocator may reach a block that is another
	// allocator's from now on.
	for _, p := range a.pools {
		p.free.discard()
		p.free, p.unmapped = a.newFreeSet(), unmappedSet{}
	}
	a.segments, a.spare = nil, nil
	a.events, a.eventStreams, a.pendingEvents = nil, nil, 0
	if a.plan != nil {
		a.plan.arena.free.discard()
	}
	a.life, a.stitch, a.plan = nil, nil, nil
	a.blocks.discard()
	a.segs.discard()
}

func (a *Allocator) validate(cfg *config.Config) error {
	if cfg.Backend != "" && cfg.Backend != "native" {
		return fmt.Errorf("%w: backend %q (only native is modelled)", ErrUnsupported, cfg.Backend)
	}
	if cfg.MaxSplitSize == 0 || cfg.LargeSegmentSize == 0 {
		return fmt.Errorf("%w: settings not initialised (start from config.Default())", ErrUnsupported)
	}
	if cfg.ExpandableSegments {
		if a.vm == nil {
			return fmt.Errorf("%w: expandable_segments:True needs a device with virtual memory support", ErrUnsupported)
		}
		g := a.vm.Granularity()
		if g == 0 || SmallBuffer%g != 0 || cfg.LargeSegmentSize%g != 0 {
			return fmt.Errorf("%w: page sizes %d and %d are not multiples of the device granularity %d",
				ErrUnsupported, SmallBuffer, cfg.LargeSegmentSize, g)
		}
	}
	return nil
}

// Config returns the settings in force.
func (a *Allocator) Config() config.Config {
	if a.lock() {
		defer a.mu.Unlock()
	}
	return a.cfg
}

// SetConfig changes the settings at run time, as
// torch.cuda.memory._set_allocator_settings does. Existing blocks stay where
// they are; expandable blocks are skipped by best fit while
// expandable_segments is off. max_split_size in Stats keeps its value from
// construction, as in PyTorch.
func (a *Allocator) SetConfig(cfg config.Config) error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if err := a.validate(&cfg); err != nil {
		return err
	}
	if cfg.MaxSplitSize != a.cfg.MaxSplitSize {
		// PyTorch's oversize counters drift from here on: blocks are
		// counted out against the new limit, not the one they were
		// counted in under.
		a.oversizeDrift = true
	}
	a.cfg = cfg
	return nil
}

// Device returns the device the allocator draws from.
func (a *Allocator) Device() Device { return a.dev }

// DeviceIndex is the device ordinal.
func (a *Allocator) DeviceIndex() int { return a.device }

// Policy returns the size policy.
func (a *Allocator) Policy() Policy { return a.policy }

// Stats returns a copy of the statistics.
func (a *Allocator) Stats() Stats {
	if a.lock() {
		defer a.mu.Unlock()
	}
	return a.stats
}

// ResetPeakStats sets every peak to the current value.
func (a *Allocator) ResetPeakStats() {
	if a.lock() {
		defer a.mu.Unlock()
	}
	a.stats.resetPeak()
}

// ResetAccumulatedStats zeroes the allocated/freed totals and the counters.
func (a *Allocator) ResetAccumulatedStats() {
	if a.lock() {
		defer a.mu.Unlock()
	}
	a.stats.resetAccumulated()
	a.accumulatedReset = true
}

// SetMemoryFraction limits this allocator to fraction of the device's total
// memory (torch.cuda.set_per_process_memory_fraction). As in PyTorch 2.9, 1
// removes the limit, and a limit also enables garbage collection when
// garbage_collection_threshold is set.
func (a *Allocator) SetMemoryFraction(fraction float64) error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	return a.setMemoryFraction(fraction)
}

// pyFloat formats f as Python's repr does, for PyTorch's messages.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	// repr uses positional notation from 1e-4 up to 1e16.
	format := byte('e')
	if a := math.Abs(f); a == 0 || (a >= 1e-4 && a < 1e16) {
		format = 'f'
	}
	s := strconv.FormatFloat(f, format, -1, 64)
	if !strings.ContainsAny(s, ".en") {
		s += ".0"
	}
	return s
}

func (a *Allocator) setMemoryFraction(fraction float64) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("Invalid fraction value: %s. Allowed range: 0~1", pyFloat(fraction))
	}
	a.setFraction = fraction < 1
	a.allowedMax = 0
	if a.setFraction {
		a.allowedMax = uint64(fraction * float64(a.deviceTotal))
	}
	return nil
}

// MemoryFraction returns the limit as a fraction of the device (1 when none).
func (a *Allocator) MemoryFraction() float64 {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if !a.setFraction {
		return 1
	}
	return float64(a.allowedMax) / float64(a.deviceTotal)
}

func (a *Allocator) gcActive() bool {
	return a.setFraction && a.cfg.GarbageCollectionThreshold > 0
}

// fail records a sticky device error so that every later call returns it.
func (a *Allocator) fail(err error) error {
	// err is nil on every successful Free: errors.Is would still walk
	// its chain checks, a percent of a C-ABI malloc+free pair.
	if err != nil && a.fatal == nil && errors.Is(err, ErrFatal) {
		a.fatal = err
	}
	return err
}

// params is PyTorch's AllocParams: one malloc's sizes and target pool.
type params struct {
	size      uint64 // rounded
	allocSize uint64 // segment size to ask for
	stream    Stream
	pool      *pool
}

func (a *Allocator) poolFor(size uint64) *pool {
	if size <= SmallSize {
		return &a.small
	}
	return &a.large
}

// ownPool says whether p is one of this allocator's pools.
func (a *Allocator) ownPool(p *pool) bool {
	if p == &a.small || p == &a.large {
		return true
	}
	if a.plan != nil && p == &a.plan.arena {
		return true
	}
	return a.life != nil && (p == &a.longSmall || p == &a.longLarge)
}

// Malloc allocates size bytes for use on stream. A size of 0 returns a nil
// block and no error, as PyTorch returns a null pointer. Failure after the
// fallback chain is an *OutOfMemoryError; a device failure is returned as
// the device reported it.
func (a *Allocator) Malloc(size uint64, stream Stream) (*Block, error) {
	if size == 0 {
		return nil, nil
	}
	if size >= maxRequest {
		return nil, &OutOfMemoryError{Device: a.device, Requested: size, TooLarge: true}
	}
	if a.lock() {
		defer a.mu.Unlock()
	}
	if a.fatal != nil {
		return nil, a.fatal
	}
	// DeviceCachingAllocator::malloc from here (malloc.go), written out
	// here rather than called: a call layer was a few percent of a cached
	// pair.
	if a.pendingEvents > 0 {
		if err := a.processEvents(); err != nil {
			return nil, a.fail(err)
		}
	}
	var rounded uint64
	if a.pytorch {
		rounded = PyTorch{}.RoundSize(&a.cfg, size) // a direct call on the hot path
	} else {
		rounded = a.policy.RoundSize(&a.cfg, size)
	}
	var b *Block
	var err error
	if a.plan != nil {
		b, err = a.planMalloc(size, rounded, stream)
	} else {
		b, err = a.mallocRounded(size, rounded, stream)
	}
	if a.check {
		a.mustCheck()
	}
	return b, err
}

// Free returns a block from Malloc. If other streams used it (RecordStream)
// it returns to the pool only when their events complete.
func (a *Allocator) Free(b *Block) error {
	if b == nil {
		return nil
	}
	if a.lock() {
		defer a.mu.Unlock()
	}
	if a.fatal != nil {
		return a.fatal
	}
	if err := a.checkLive(b); err != nil {
		return err
	}
	// DeviceCachingAllocator::free from here, written out rather than
	// called, as malloc is in Malloc: a call on every free (issue 19).
	pi := b.pool.statIdx
	b.allocated = false
	a.stats.Allocation.decrease(pi, 1)
	a.stats.AllocatedBytes.decrease(pi, int64(b.size))
	a.record(ActionFreeRequested, b.addr, b.requested, b.stream)
	if b.size >= a.cfg.MaxSplitSize {
		a.stats.OversizeAllocations.decrease(1)
	}
	if a.life != nil {
		a.life.freed(a, b)
	}
	if a.plan != nil {
		a.planFreed(b)
	}
	var err error
	if b.streamUses != nil {
		err = a.insertEvents(b)
	} else {
		err = a.freeBlock(b)
	}
	if a.check {
		a.mustCheck()
	}
	return a.fail(err)
}

// checkLive says whether b is a block this allocator handed out and that
// has not been freed.
func (a *Allocator) checkLive(b *Block) error {
	if !a.ownPool(b.pool) {
		return ErrForeignBlock
	}
	if !b.allocated {
		return ErrNotAllocated
	}
	return nil
}

// RecordStream marks an allocated block as used on stream s, so that its
// free waits for the work queued on s (Tensor.record_stream). The block's
// own stream is ignored. Observers of ActionRecordStream see every call on
// a live block, its own stream's too, as the caller made it.
func (a *Allocator) RecordStream(b *Block, s Stream) error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if err := a.checkLive(b); err != nil {
		return err
	}
	a.record(ActionRecordStream, b.addr, 0, s)
	if s == b.stream {
		return nil
	}
	if b.streamUses == nil {
		b.streamUses = new([]Stream)
	}
	for _, u := range *b.streamUses {
		if u == s {
			return nil
		}
	}
	*b.streamUses = append(*b.streamUses, s)
	return nil
}

// ProcessEvents returns to their pools the pending blocks whose events have
// completed, as every malloc does first.
func (a *Allocator) ProcessEvents() error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if a.fatal != nil {
		return a.fatal
	}
	err := a.processEvents()
	if a.check {
		a.mustCheck()
	}
	return a.fail(err)
}

// EmptyCache waits for all pending events, then returns every fully free
// segment to the device and unmaps every whole free page of expandable
// segments (torch.cuda.empty_cache). Live blocks are untouched.
func (a *Allocator) EmptyCache() error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	if a.fatal != nil {
		return a.fatal
	}
	err := a.releaseCachedBlocks()
	a.record(ActionEmptyCache, 0, 0, 0)
	if a.check {
		a.mustCheck()
	}
	return a.fail(err)
}

func (a *Allocator) mustCheck() {
	if err := a.checkInvariants(); err != nil {
		panic(err)
	}
}

package gpu

import (
	"fmt"
	"slices"
)

// Process is one OS process on a GPU, with its own CUDA context. It is the
// allocator.Device (and allocator.VirtualMemory) an allocator runs on. Its
// methods are safe for concurrent use.
type Process struct {
	gpu  *GPU
	id   int    // creation order on the GPU
	slot uint64 // which address window it holds
	base uint64

	closed bool
	used   uint64 // physical bytes held, context included

	va       *vaSpace
	segments map[uint64]segment

	vmm vmmState
	ev  eventState

	faults []fault
	// sticky is the error that corrupted the context, nil while healthy.
	sticky error

	tally tally
}

// segment is one cudaMalloc allocation.
type segment struct {
	va   uint64 // bytes of address space taken
	phys uint64 // physical bytes held
}

// NewProcess starts a process on g. Its context is charged at once, as the
// first CUDA call of a real process creates it; if the memory cannot hold
// it the error satisfies errors.Is(err, allocator.ErrDeviceOutOfMemory).
//
// The process gets the lowest address window no live process holds, so a
// process started after another exited reuses its addresses, as a restarted
// trainer would, and a GPU can serve any number of processes over time.
func (g *GPU) NewProcess() (*Process, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot := uint64(0)
	for slices.ContainsFunc(g.live, func(q *Process) bool { return q.slot == slot }) {
		slot++
	}
	if slot >= (maxAddress-g.base)/g.window {
		return nil, fmt.Errorf("sim: no address window left for another process (%d live)", len(g.live))
	}
	p := &Process{
		gpu:      g,
		id:       len(g.all),
		slot:     slot,
		base:     g.base + slot*g.window,
		segments: map[uint64]segment{},
		vmm:      newVMMState(),
		ev:       newEventState(),
		tally:    tally{by: map[Call]Counter{}},
	}
	p.va = newVASpace(p.base, g.window)
	if !g.hold(p, g.context) {
		return nil, deviceError("cuDevicePrimaryCtxRetain", errOutOfMemory,
			"out of memory creating a context of %d bytes (%d free)", g.context, g.capacity-g.used)
	}
	g.all = append(g.all, p)
	g.live = append(g.live, p)
	return p, nil
}

// ID returns the process's number on its GPU, counting from 0 in creation
// order; unlike its address window, never reused.
func (p *Process) ID() int { return p.id }

// GPU returns the device the process runs on.
func (p *Process) GPU() *GPU { return p.gpu }

// AddressBase returns the start of the process's virtual address window.
func (p *Process) AddressBase() uint64 { return p.base }

// Used returns the physical bytes the process holds, its context included;
// zero once closed.
func (p *Process) Used() uint64 {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.used
}

// Closed reports whether Close has run.
func (p *Process) Closed() bool {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.closed
}

// Counters returns the process's call tallies so far.
func (p *Process) Counters() Counters {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.tally.snapshot()
}

// Total returns the sum of the process's call tallies so far: Counters'
// Total without the copy of the per-kind map, for a caller that asks
// often.
func (p *Process) Total() Counter {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.tally.total
}

// Close ends the process: like process exit, it frees its segments, pages,
// reservations, events and context whatever state they are in, sticky
// error included. Later calls fail with ErrClosed, and so does a second
// Close.
func (p *Process) Close() error {
	g := p.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.closed {
		return fmt.Errorf("sim: Close of process %d: %w", p.id, ErrClosed)
	}
	g.drop(p, p.used)
	p.closed = true
	p.segments = nil
	p.va = nil
	p.vmm = vmmState{}
	p.ev = eventState{}
	p.faults = nil
	g.live = slices.DeleteFunc(g.live, func(q *Process) bool { return q == p })
	return nil
}

// begin accounts one call of kind c and says whether it may go ahead. The
// caller holds the GPU lock. A closed process is not charged: it makes no
// calls. A corrupted context and an injected fault are charged, because on
// hardware the failing call is still made.
func (p *Process) begin(c Call) error {
	if p.closed {
		return fmt.Errorf("sim: %s on process %d: %w", c, p.id, ErrClosed)
	}
	p.charge(c)
	if p.sticky != nil {
		return p.stickyError(c)
	}
	return p.fire(c)
}

// charge adds one call of kind c to the tally.
func (p *Process) charge(c Call) { p.tally.charge(c, p.gpu.costs.Of(c)) }

// end records a failure of call c, and passes err on.
func (p *Process) end(c Call, err error) error {
	if err != nil && !p.closed {
		p.tally.fail(c)
	}
	return err
}

// Malloc is cudaMalloc: a segment of size bytes, holding size rounded up to
// the granularity of physical memory.
func (p *Process) Malloc(size uint64) (uint64, error) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	addr, err := p.malloc(size)
	return addr, p.end(CallMalloc, err)
}

func (p *Process) malloc(size uint64) (uint64, error) {
	if err := p.begin(CallMalloc); err != nil {
		return 0, err
	}
	g := p.gpu
	if size == 0 {
		return 0, invalid(CallMalloc, "size 0")
	}
	// Larger than the device can ever hold: the driver says out of memory,
	// and checking first keeps the rounding below from overflowing.
	if size > g.capacity {
		return 0, oom(CallMalloc)
	}
	phys := alignUp(size, g.granularity)
	align := smallAlign
	if size >= largeAlign {
		align = largeAlign
	}
	extent := alignUp(size, align)
	if phys > g.capacity-g.used {
		return 0, oom(CallMalloc)
	}
	addr, ok := p.va.alloc(extent, align)
	if !ok {
		return 0, p.noAddressSpace(CallMalloc, extent)
	}
	g.hold(p, phys)
	p.segments[addr] = segment{va: extent, phys: phys}
	return addr, nil
}

// Free is cudaFree. It synchronises the device, so every event the process
// recorded is complete afterwards.
func (p *Process) Free(addr uint64) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallFree, p.free(addr))
}

func (p *Process) free(addr uint64) error {
	if err := p.begin(CallFree); err != nil {
		return err
	}
	s, ok := p.segments[addr]
	if !ok {
		return invalid(CallFree, "%#x is not a segment of process %d", addr, p.id)
	}
	p.charge(CallDeviceSync)
	p.ev.completeAll()
	delete(p.segments, addr)
	p.va.release(addr, s.va)
	p.gpu.drop(p, s.phys)
	return nil
}

// MemGetInfo is cudaMemGetInfo: what no process on the GPU holds, and the
// capacity.
func (p *Process) MemGetInfo() (free, total uint64, err error) {
	g := p.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := p.end(CallMemGetInfo, p.begin(CallMemGetInfo)); err != nil {
		return 0, 0, err
	}
	return g.capacity - g.used, g.capacity, nil
}

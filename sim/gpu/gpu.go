package gpu

import (
	"errors"
	"fmt"
	"sync"
)

// Defaults for Options fields left zero.
const (
	// DefaultGranularity is the VMM page granularity
	// (cuMemGetAllocationGranularity) of current NVIDIA GPUs, and the large
	// page the driver backs cudaMalloc with.
	DefaultGranularity = 2 * miB

	// DefaultContextOverhead is what one process's CUDA context costs before
	// it allocates anything: the runtime, cuBLAS/cuDNN workspaces and the
	// loaded kernels. nvidia-smi shows roughly 300-600 MiB for a PyTorch
	// process with lazy module loading (CUDA >= 11.7), more without it;
	// tsfast measures it per process and quotes "~0.5 GB/process on
	// consumer cards" (../shared/docs/prior-art.md §6.3). A round figure
	// from that range, not a measurement.
	DefaultContextOverhead = 500 * miB

	// DefaultAddressBase looks like the device pointers CUDA prints on
	// 64-bit Linux, where unified addressing puts device memory high in the
	// host's address space.
	DefaultAddressBase = uint64(0x7f0000000000)

	// DefaultAddressSpace is each process's window of virtual addresses,
	// 2^49 bytes: what current GPUs give a process (2^47 to 2^49), far
	// more than their memory. Expandable segments reserve about 1.125 x
	// the GPU's memory per (stream, pool), and PyTorch reserves freely: a
	// 141 GiB device needs ~160 GiB per segment, and 512 TiB holds over
	// three thousand of them. A device of more than 1 TiB gets a window of
	// vaPerCapacity times its memory instead (AddressSpace), so that a
	// trace never runs out of address space by accident.
	DefaultAddressSpace = 512 * tiB

	// vaPerCapacity is the default window's minimum size in multiples of
	// the (power-of-two rounded) capacity: room for over 450 expandable
	// reservations.
	vaPerCapacity = 512

	// maxSize bounds sizes so that rounding and address arithmetic can
	// never overflow 64 bits.
	maxSize = uint64(1) << 56

	// maxAddress bounds every address, so that traces that store pointers
	// as int64 (PyTorch's snapshots do) can hold them.
	maxAddress = uint64(1) << 63
)

// Options configure a GPU. Capacity is required; zero values elsewhere mean
// the defaults above.
type Options struct {
	// Name is the device's name in reports.
	Name string
	// Capacity is the device memory in bytes, cudaMemGetInfo's total.
	Capacity uint64
	// Granularity is the VMM page granularity; a power of two.
	Granularity uint64
	// ContextOverhead is charged to every process when it starts.
	ContextOverhead uint64
	// NoContextOverhead charges nothing for contexts; ContextOverhead must
	// then be zero. Tests use it to reason in round numbers.
	NoContextOverhead bool
	// Costs is the latency model. The zero CostModel means DefaultCosts();
	// a partly filled one is used as given.
	Costs CostModel
	// AddressBase is where the first address window starts; a multiple of
	// 2 MiB and of Granularity.
	AddressBase uint64
	// AddressSpace is the size of each process's virtual address window; a
	// multiple of 2 MiB and of Granularity. Zero: DefaultAddressSpace, or
	// 512 times the capacity rounded up to a power of two when that is
	// more (at most 2^56). Running out of it is its own error
	// (allocator.ErrAddressSpaceExhausted), not out of memory.
	AddressSpace uint64
	// EventsCompleteImmediately makes every event complete when recorded,
	// for runs that do not model stream timing at all.
	EventsCompleteImmediately bool
}

// GPU is one simulated physical device, shared by the processes made on it.
type GPU struct {
	// mu guards the GPU and the state of every process on it, so that a
	// process's call and its effect on the shared memory are one step.
	mu sync.Mutex

	name        string
	capacity    uint64
	granularity uint64
	context     uint64
	costs       CostModel
	base        uint64
	window      uint64
	immediate   bool

	used uint64     // physical bytes held by live processes
	live []*Process // in creation order
	all  []*Process // every process ever made, for Counters
}

// New checks opts and returns an empty device.
func New(opts Options) (*GPU, error) {
	g := &GPU{
		name:        opts.Name,
		capacity:    opts.Capacity,
		granularity: opts.Granularity,
		context:     opts.ContextOverhead,
		costs:       opts.Costs,
		base:        opts.AddressBase,
		window:      opts.AddressSpace,
		immediate:   opts.EventsCompleteImmediately,
	}
	if g.name == "" {
		g.name = "simulated GPU"
	}
	if g.capacity == 0 {
		return nil, errors.New("sim: Options.Capacity is required")
	}
	if g.capacity > maxSize {
		return nil, fmt.Errorf("sim: capacity %d exceeds the supported %d bytes", g.capacity, maxSize)
	}
	if g.granularity == 0 {
		g.granularity = DefaultGranularity
	}
	if !isPow2(g.granularity) || g.granularity > maxSize {
		return nil, fmt.Errorf("sim: granularity %d is not a power of two up to %d", g.granularity, maxSize)
	}
	switch {
	case opts.NoContextOverhead && opts.ContextOverhead != 0:
		return nil, fmt.Errorf("sim: NoContextOverhead set with ContextOverhead %d", opts.ContextOverhead)
	case !opts.NoContextOverhead && g.context == 0:
		g.context = DefaultContextOverhead
	}
	if g.context > maxSize {
		return nil, fmt.Errorf("sim: context overhead %d exceeds the supported %d bytes", g.context, maxSize)
	}
	if g.costs == (CostModel{}) {
		g.costs = DefaultCosts()
	}
	if err := g.costs.validate(); err != nil {
		return nil, err
	}
	align := max(largeAlign, g.granularity)
	if g.base == 0 {
		g.base = DefaultAddressBase
	}
	if g.base%align != 0 {
		return nil, fmt.Errorf("sim: address base %#x is not a multiple of %d", g.base, align)
	}
	if g.base > maxAddress/2 {
		return nil, fmt.Errorf("sim: address base %#x leaves no room below %#x", g.base, maxAddress)
	}
	if g.window == 0 {
		g.window = max(DefaultAddressSpace, min(maxSize, ceilPow2(g.capacity)*vaPerCapacity))
	}
	if g.window%align != 0 {
		return nil, fmt.Errorf("sim: address space %d is not a multiple of %d", g.window, align)
	}
	if g.window > maxSize {
		return nil, fmt.Errorf("sim: address space %d exceeds the supported %d bytes", g.window, maxSize)
	}
	return g, nil
}

// Name returns the device's name.
func (g *GPU) Name() string { return g.name }

// Capacity returns the device memory in bytes.
func (g *GPU) Capacity() uint64 { return g.capacity }

// Granularity returns the VMM page granularity.
func (g *GPU) Granularity() uint64 { return g.granularity }

// ContextOverhead returns what each process's context costs.
func (g *GPU) ContextOverhead() uint64 { return g.context }

// Costs returns the latency model in use.
func (g *GPU) Costs() CostModel { return g.costs }

// Used returns the physical bytes held by all live processes, their
// contexts included.
func (g *GPU) Used() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.used
}

// Free returns the physical bytes no process holds: cudaMemGetInfo's free.
func (g *GPU) Free() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.capacity - g.used
}

// Processes returns the processes not yet closed, oldest first.
func (g *GPU) Processes() []*Process {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Process(nil), g.live...)
}

// Counters sums the call tallies of every process ever made on the GPU,
// closed ones included: their calls were made.
func (g *GPU) Counters() Counters {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := Counters{ByCall: map[Call]Counter{}}
	for _, p := range g.all {
		out.Add(p.tally.snapshot())
	}
	return out
}

// String names the device and its memory, for logs.
func (g *GPU) String() string {
	return fmt.Sprintf("%s (%d bytes)", g.name, g.capacity)
}

// hold charges n physical bytes to p if the memory has room.
func (g *GPU) hold(p *Process, n uint64) bool {
	if n > g.capacity-g.used {
		return false
	}
	g.used += n
	p.used += n
	return true
}

// drop returns n physical bytes held by p.
func (g *GPU) drop(p *Process, n uint64) {
	g.used -= n
	p.used -= n
}

// ceilPow2 is the least power of two >= n (n <= 2^56).
func ceilPow2(n uint64) uint64 {
	p := uint64(1)
	for p < n {
		p <<= 1
	}
	return p
}

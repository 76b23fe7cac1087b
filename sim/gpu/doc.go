// Package gpu is a simulated GPU: enough of the CUDA runtime and driver for
// the caching allocator to run, decide and fail exactly as it would on
// hardware, on a machine with no GPU at all.
//
// # Model
//
// A GPU is one physical memory of Capacity bytes. Everything that holds
// physical memory is charged against that one number, whichever process
// holds it: a CUDA context, a cudaMalloc segment, a cuMemCreate page. That is
// the point of the simulator. The question the project asks ("how many
// parallel trials fit on this GPU?") is a question about several processes
// competing for one memory, and an allocator that looks only at itself
// cannot answer it. So MemGetInfo reports capacity minus what all processes
// hold, and one process's segment can make another's cudaMalloc fail. A
// single mutex in GPU guards the physical counter and every process's state;
// allocator calls are rare and short next to the work a trainer does, and
// one lock keeps the model simple to reason about under -race.
//
// A Process is one OS process with its own CUDA context. What a real context
// owns, a Process owns: its virtual address space, its segments,
// reservations, pages and mappings, its events, and its error state. On
// process exit the driver frees all of it, and so does Close. A sticky error
// (a device-side assert, an illegal address) corrupts one context, not the
// GPU; the other processes carry on, which is what the HPO runs in the BERT-family study
// relied on when they restarted a crashed trial in a fresh process
// (its field reports).
//
// Physical use is page-granular. A cudaMalloc of n bytes holds n rounded up
// to Granularity (2 MiB by default), since the driver backs allocations with
// whole large pages; cuMemCreate sizes must already be multiples of it. The
// context is charged ContextOverhead bytes when the process starts.
//
// # Addresses
//
// Every process has a private window of virtual addresses, AddressSpace
// bytes long, starting at AddressBase + slot*AddressSpace, where slot is the
// lowest window no live process holds. Live processes' windows do not
// overlap, so an address names its process, and one process's address
// handed to another is rejected as unknown rather than silently aliased. A
// process started after another exited takes over its window, so a
// restarted trainer sees the addresses its predecessor saw, as on hardware
// where each process has a whole address space of its own.
//
// Inside a window, segments and reservations come from one first-fit
// allocator: the lowest free address that fits, aligned to 2 MiB for sizes
// of 2 MiB and more (512 bytes below that; Granularity or 2 MiB, whichever
// is larger, for reservations). Real drivers behave this way closely enough
// that a freed range is handed to the next cudaMalloc that fits it, and the
// allocator's decisions depend on addresses: best fit breaks ties by
// address, and only adjacent blocks coalesce. Being deterministic matters
// more than matching any particular driver: the same sequence of calls on
// the same options gives the same addresses, run after run, so replays and
// tests can compare layouts.
//
// The window is far larger than the memory, as on hardware (2^47 to 2^49
// bytes of virtual addresses per process): 2^49 by default, 512 times the
// memory for a larger device. PyTorch reserves address space freely (1.125
// times the memory per stream and pool under expandable segments), and a
// trace must never run out of it by accident. Running out anyway (a window
// set too small) is its own error, allocator.ErrAddressSpaceExhausted, with
// the driver's CUDA_ERROR_OUT_OF_MEMORY name but not counted as out of
// memory: PyTorch raises a plain error for it, and freeing cached memory
// would not help.
//
// # Events
//
// Nothing runs on a simulated GPU, so nothing completes on its own. An event
// stays incomplete until the caller says the work before it has finished
// (CompleteEvents, CompleteAllEvents, CompleteEvent) or a synchronising call
// waits for it: cudaEventSynchronize completes the event and the ones
// recorded before it on its stream (streams run in order), a stream
// synchronisation completes its stream's events, and cudaFree, which
// synchronises the device, completes all of the process's events. A
// replayer therefore controls exactly when record-stream frees finish.
// Options.EventsCompleteImmediately turns the clock off: every event is
// complete when recorded.
//
// # Faults
//
// Tests and the trial runner need the failures real GPUs produce: an OOM on
// the third segment, a context corrupted mid-trial. FailMalloc,
// FailCreatePage and FailWith make the Nth call of a kind fail once;
// InjectStickyError corrupts the context so every later call fails with an
// error that satisfies errors.Is(err, allocator.ErrFatal). Misuse of the API
// (freeing an unknown address, mapping outside a reservation, releasing a
// mapped page) returns a non-sticky DeviceError with a CUDA-like name, so an
// allocator bug surfaces as a test failure instead of a silent leak.
//
// # Cost
//
// The simulator spends no time; it models it. Every device call is counted
// per kind with the latency from CostModel added to a modelled total, and
// cudaFree also counts the implicit device synchronisation it performs.
// Failed calls are charged too: a cudaMalloc that fails took its time.
// Counters lets reports say how much driver time a policy would have spent
// (a cache miss costs a cudaMalloc, empty_cache costs syncs), which is the
// whole argument for a caching allocator. The latencies are fixed per call;
// the time a synchronisation waits for queued kernels depends on a workload
// the simulator does not have, so it is not modelled.
package gpu

import "github.com/memreplay/memreplay/allocator"

// A Process is what an allocator runs on: the runtime calls always, the
// VMM calls for expandable segments.
var (
	_ allocator.Device        = (*Process)(nil)
	_ allocator.VirtualMemory = (*Process)(nil)
)

// Sizes used throughout.
const (
	kiB = uint64(1) << 10
	miB = uint64(1) << 20
	giB = uint64(1) << 30
	tiB = uint64(1) << 40

	// smallAlign is cudaMalloc's guaranteed alignment (256 bytes) rounded up
	// to PyTorch's 512-byte block granularity, so small segments never
	// straddle what the allocator would consider one block.
	smallAlign = uint64(512)
	// largeAlign is the alignment real drivers give allocations of a large
	// page or more, and what segment coalescing in traces assumes.
	largeAlign = 2 * miB
)

func alignUp(x, a uint64) uint64 { return (x + a - 1) &^ (a - 1) }

func isPow2(x uint64) bool { return x != 0 && x&(x-1) == 0 }

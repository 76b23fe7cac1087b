// Package realgpu is the real GPU behind a replay: a replay.Process over the
// CUDA driver (package allocator/cuda), so that `memreplay replay --device
// cuda TRACE` runs the recorded program's allocations through the caching
// allocator on the GPU itself, with the driver's own cudaMalloc, cudaFree
// and VMM calls, its out-of-memory answers and their measured time.
//
//	b, err := realgpu.Open(realgpu.Options{Ordinal: 0})   // cuInit, the device's primary context
//	defer b.Close()                                      // frees what the replay left, releases the context
//	res, err := replay.Run(r, replay.Options{NewProcess: b.NewProcess, Check: true})
//
// # What the replay gets from the GPU, and what it keeps from the trace
//
// Memory: every segment and page is the driver's (cuMemAlloc_v2,
// cuMemCreate, cuMemMap, ...), so the driver decides where it goes and when
// the GPU is full. Nothing is read or written: the replay has no kernels.
//
// Addresses: the driver's pointers are shifted up by AddressOffset (2^56)
// before the replay sees them, and back on every call. A trace's addresses
// are pointers of another process on another (or the same kind of) GPU,
// and the replay's device wrapper keeps a table between recorded and real
// ranges that must never confuse the two (replay.Process's contract); the
// simulated GPU starts at 2^56 for the same reason. In check mode the
// wrapper gives each segment its recorded address, so the allocator sees
// the recording's layout whatever the driver returned.
//
// Streams: a trace's stream values are cudaStream_t pointers of the
// recorded process. They must never reach the driver, so every event is
// recorded on, and every stream synchronisation waits for, the legacy
// default stream (0). The allocator still sees the trace's streams: they
// key its pools.
//
// Event timing: with no kernels running, every event on the GPU completes
// as soon as it is recorded. Left at that, a free waiting on record_stream
// events (or one the replay defers to a private stream, see the
// sim/replay package comment) would come back at the allocator's next
// query, earlier than in the recording, and the decisions that depend on
// it (which block a malloc finds, whether it must release the cache first)
// could differ. So the Process keeps the replay's clock on top of the
// driver's events, exactly as the simulator does: an event is complete when
// the driver says so (cuEventQuery) and the trace says so (CompleteEvents:
// a stream_sync, the free_completed of a deferred free) or a synchronising
// call waited for it (SynchronizeStream and SynchronizeEvent on its
// stream, Free on all, as cudaFree synchronises the device). Then a replay
// on the GPU decides exactly as on the simulator, and `--check` holds on
// the GPU wherever it holds on the simulator (the tests run it on the fake
// driver: sim/replay/realgpu's tests).
//
// Capacity: the GPU's memory is what it is, less what its context and
// other processes hold (cuMemGetInfo). Options.Capacity, when positive and
// at most the device's memory, makes each replayed device a smaller GPU:
// the Process refuses a cudaMalloc or cuMemCreate that would take its
// holdings past the limit with CUDA_ERROR_OUT_OF_MEMORY, counting the
// bytes as the simulator and the driver do (a cudaMalloc holds its size
// rounded up to the granularity, a page its size), and reports the limit
// as the device's total. This decides like a simulated device of that
// capacity, including the failed cudaMalloc and the free-and-retry that
// follows; per_process_memory_fraction would not call cudaMalloc at all
// and change the OOM message, so it is not used.
//
// Counters: every call the allocator makes is counted under its gpu.Call
// kind (cudaMalloc, cudaFree, cuMemCreate, cuMemMap, ...) with the wall
// time measured around the driver call (time.Now before and after), and a
// cudaFree also counts the device synchronisation inside it, with no time
// of its own (its time is the cudaFree's), as the simulator does. So the
// call counts of a replay on the GPU and on the simulator are the same,
// and the reports show measured time where the simulator's are modelled
// (Info().MeasuredTime). A query of (or wait for) an event the driver has
// already reported complete, which only the replay's clock held back,
// makes no driver call and counts with no time. The clock's own synchronisation (CompleteEvents)
// is not a call of the allocator and is not counted, as in the simulator.
//
// End: Backend.Close tears down what the replay left on the GPU (unmaps
// mapped pages, releases them, frees reservations and segments: the
// cached and the live blocks of the trace's end state), then releases the
// primary context, so that a replay leaks nothing even inside a process
// that holds the context too. Calls after a sticky error (illegal address,
// ...) fail with it; the replay then ends with that error, naming the CUDA
// error, and Close still releases the context.
package realgpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/cuda"
	"github.com/memreplay/memreplay/sim/replay"
)

// Options choose the GPU.
type Options struct {
	// Library is the driver library; "" takes $MEMREPLAY_LIBCUDA, else
	// libcuda.so.1 (cuda.Open's rules).
	Library string
	// Ordinal is the GPU, as CUDA_VISIBLE_DEVICES numbers them.
	Ordinal int
	// Capacity, when positive, limits each replayed device to that many
	// bytes of the GPU (see the package comment); it must not exceed the
	// device's memory. 0 gives the replay all of it.
	Capacity uint64
}

// ErrCapacity is a Capacity larger than the device.
var ErrCapacity = errors.New("realgpu: capacity larger than the GPU")

// Backend is one GPU opened for replays: it hands out a Process per
// replayed device (NewProcess, to be passed as replay.Options.NewProcess)
// and closes them all at the end.
type Backend struct {
	drv     *cuda.Driver
	opts    Options
	name    string
	total   uint64
	version int

	mu    sync.Mutex
	spare *cuda.Device // the device Open checked, for the first process
	procs []*Process
	done  bool
}

// Open loads the driver, checks that the GPU exists (and, with a Capacity,
// that it is no larger than the GPU) and retains its primary context. The
// errors are cuda.Open's and Driver.Device's: cuda.ErrNoDriver,
// cuda.ErrNoDevice, cuda.ErrNoCgo wrapped, each one line saying what is
// missing; and ErrCapacity.
func Open(o Options) (*Backend, error) {
	var copts []cuda.Option
	if o.Library != "" {
		copts = append(copts, cuda.WithLibrary(o.Library))
	}
	drv, err := cuda.Open(copts...)
	if err != nil {
		return nil, err
	}
	dev, err := drv.Device(o.Ordinal)
	if err != nil {
		return nil, err
	}
	b := &Backend{drv: drv, opts: o, total: dev.TotalMem(), spare: dev,
		name: fmt.Sprintf("%s, cuda:%d", dev.Name(), o.Ordinal)}
	b.version, _ = drv.Version()
	if o.Capacity > b.total {
		dev.Close()
		return nil, fmt.Errorf("%w: %s asked for, %s has %s", ErrCapacity,
			allocator.FormatSize(o.Capacity), b.name, allocator.FormatSize(b.total))
	}
	return b, nil
}

// Name names the GPU: "NVIDIA H200, cuda:0".
func (b *Backend) Name() string { return b.name }

// TotalMem is the GPU's memory in bytes.
func (b *Backend) TotalMem() uint64 { return b.total }

// Describe is one line for logs: the GPU, its memory, the driver's CUDA
// version and library.
func (b *Backend) Describe() string {
	s := fmt.Sprintf("%s (%s", b.name, allocator.FormatSize(b.total))
	if b.version > 0 {
		s += fmt.Sprintf(", CUDA %d.%d driver", b.version/1000, b.version%1000/10)
	}
	return s + ", " + b.drv.Path() + ")"
}

// NewProcess is a replay.NewProcessFunc: a Process on the GPU for the
// traced device. Every traced device of a trace replays on the same GPU,
// each as a Process of its own (its own allocator, events and, with a
// Capacity, its own limit), sharing the GPU's memory. The capacity the
// replay proposes for a simulated device is not used: the GPU's memory, or
// Options.Capacity, is the device's.
func (b *Backend) NewProcess(device int32, _ uint64, _ string) (replay.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil, fmt.Errorf("realgpu: device %d: %w", device, cuda.ErrClosed)
	}
	dev := b.spare
	b.spare = nil
	if dev == nil {
		var err error
		if dev, err = b.drv.Device(b.opts.Ordinal); err != nil {
			return nil, err
		}
	}
	p := newProcess(dev, b.name, b.opts.Capacity)
	b.procs = append(b.procs, p)
	return p, nil
}

// Processes returns the processes handed out so far, in order.
func (b *Backend) Processes() []*Process {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*Process(nil), b.procs...)
}

// Close closes every process (see Process.Close) and releases the GPU.
// Call it after the replay's results and recorders were read: the
// processes' counters stay readable, but nothing is on the GPU any more.
// It returns the first error; a second Close does nothing.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	var first error
	for _, p := range b.procs {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	if b.spare != nil {
		if err := b.spare.Close(); err != nil && first == nil {
			first = err
		}
		b.spare = nil
	}
	return first
}

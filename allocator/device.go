package allocator

import (
	"errors"
	"fmt"
)

// Stream is a raw cudaStream_t handle value. The default stream is 0. Streams
// order free blocks as unsigned integers, exactly as PyTorch compares the
// pointer values, so the default stream sorts first.
type Stream uint64

// Event is a device event handle recorded on a stream (cudaEvent_t). The
// allocator records one per extra stream of a block freed after
// RecordStream, and returns the block to its pool when all have completed.
type Event uint64

// PageHandle names one physical page created by VirtualMemory.CreatePage
// (a CUmemGenericAllocationHandle).
type PageHandle uint64

// Device is what the allocator needs from a GPU: whole-segment allocation
// (cudaMalloc/cudaFree), the memory counters (cudaMemGetInfo) and events.
// A Device serves one allocator; several Devices may share one physical
// memory (the sim package's processes on one GPU).
//
// Errors: an allocation that fails for lack of memory must return an error
// for which errors.Is(err, ErrDeviceOutOfMemory) holds; the allocator then
// runs its fallback chain. A sticky error after which the device context is
// unusable (device-side assert, illegal address) must satisfy
// errors.Is(err, ErrFatal); the allocator then refuses all further work with
// that error. Any other error is returned to the caller at once.
type Device interface {
	// Malloc returns the base address of a new segment of exactly size bytes.
	Malloc(size uint64) (uint64, error)
	// Free releases a segment returned by Malloc. On a GPU it synchronises
	// the device, which is why the caching allocator exists.
	Free(addr uint64) error
	// MemGetInfo reports the device's free and total bytes.
	MemGetInfo() (free, total uint64, err error)
	// RecordEvent records an event on stream (cudaEventRecord).
	RecordEvent(s Stream) (Event, error)
	// QueryEvent reports whether the event has completed, without waiting
	// (cudaEventQuery). A completed event is released by the device.
	QueryEvent(e Event) (bool, error)
	// SynchronizeEvent waits for the event and releases it
	// (cudaEventSynchronize).
	SynchronizeEvent(e Event) error
}

// VirtualMemory is the optional capability that expandable segments need:
// the CUDA virtual memory management calls. A Device that also implements
// it can serve expandable_segments:True; one that does not makes that
// setting an error at construction.
type VirtualMemory interface {
	// Granularity is the page granularity of physical allocations
	// (cuMemGetAllocationGranularity); 2 MiB and 20 MiB pages must be
	// multiples of it.
	Granularity() uint64
	// ReserveAddress reserves a virtual address range of size bytes with
	// nothing mapped (cuMemAddressReserve).
	ReserveAddress(size uint64) (uint64, error)
	// FreeAddress returns a reserved range (cuMemAddressFree).
	FreeAddress(addr, size uint64) error
	// CreatePage allocates one physical page of size bytes (cuMemCreate).
	// Out of memory satisfies errors.Is(err, ErrDeviceOutOfMemory).
	CreatePage(size uint64) (PageHandle, error)
	// Map maps a page at addr, inside a reserved range (cuMemMap).
	Map(addr uint64, h PageHandle) error
	// SetAccess makes a mapped range readable and writable by the device
	// (cuMemSetAccess). PyTorch calls it once per mapped run.
	SetAccess(addr, size uint64) error
	// Unmap unmaps size bytes at addr (cuMemUnmap).
	Unmap(addr, size uint64) error
	// Release frees a physical page (cuMemRelease).
	Release(h PageHandle) error
	// SynchronizeStream waits for the stream (cudaStreamSynchronize); the
	// allocator calls it before unmapping pages of a segment of that stream.
	SynchronizeStream(s Stream) error
}

// PageRefuser is an optional extension of VirtualMemory for a device that
// knows its free memory exactly (the simulator). Mapping n pages is n
// CreatePage calls in a row; when one runs out of memory the allocator
// releases the pages created before it (PyTorch's map_block). With a
// reservation of 1.125 x the device's memory, a request the device cannot
// hold makes tens of thousands of calls before failing. RefusePages
// answers at once: when the n pages of size bytes would not all fit, it
// counts the calls that loop and its cleanup make (the successful
// cuMemCreates, the failing one, the cuMemReleases), as if they were made,
// and returns the failing call's error; nil says they fit, or that it
// cannot tell (faults armed), and the allocator makes the calls.
type PageRefuser interface {
	RefusePages(size, n uint64) error
}

// ErrDeviceOutOfMemory is what a Device returns (possibly wrapped) when a
// segment or page cannot be allocated for lack of memory
// (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY).
var ErrDeviceOutOfMemory = errors.New("device out of memory")

// ErrAddressSpaceExhausted is what a Device returns (possibly wrapped) when
// a segment or reservation finds no room in the process's virtual address
// space, though memory may remain. The driver says CUDA_ERROR_OUT_OF_MEMORY
// there too, but it is another condition: PyTorch raises a plain error for a
// failed cuMemAddressReserve, not an OutOfMemoryError, and no freeing of
// cached memory would help. A GPU's address space is far larger than its
// memory, so a trace meets this only on a device modelled too small.
var ErrAddressSpaceExhausted = errors.New("virtual address space exhausted")

// ErrFatal marks a sticky device error: the context is corrupt and every
// later call fails. Devices wrap it (DeviceError with Sticky set does); the
// allocator then stops serving requests and returns that error.
var ErrFatal = errors.New("fatal device error")

// DeviceError describes a failed device call by the driver's names.
type DeviceError struct {
	Call   string // the driver call, e.g. "cuMemAlloc_v2"
	Code   int    // the driver's numeric error code
	Name   string // the driver's error name, e.g. "CUDA_ERROR_ILLEGAL_ADDRESS"
	Msg    string // the driver's description
	Sticky bool   // the context is unusable from now on
	OOM    bool   // the call failed for lack of memory
	// NoAddressSpace says the call found no room in the virtual address
	// space (ErrAddressSpaceExhausted); OOM is then false.
	NoAddressSpace bool
}

func (e *DeviceError) Error() string {
	s := fmt.Sprintf("%s failed: %s (%d)", e.Call, e.Name, e.Code)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Sticky {
		s += " [sticky: the device context is unusable]"
	}
	return s
}

// Is lets errors.Is match ErrFatal for sticky errors,
// ErrDeviceOutOfMemory for allocation failures and ErrAddressSpaceExhausted
// for a full address space.
func (e *DeviceError) Is(target error) bool {
	return (target == ErrFatal && e.Sticky) || (target == ErrDeviceOutOfMemory && e.OOM) ||
		(target == ErrAddressSpaceExhausted && e.NoAddressSpace)
}

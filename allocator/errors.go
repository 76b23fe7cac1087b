package allocator

import (
	"errors"
	"fmt"
	"strconv"
)

// OutOfMemoryError is malloc's failure after the whole fallback chain, with
// what PyTorch puts into torch.OutOfMemoryError.
type OutOfMemoryError struct {
	Device      int
	Requested   uint64 // the caller's size
	Rounded     uint64 // after RoundSize (the size in the trace's oom entry)
	AllocSize   uint64 // the segment size asked of the device ("Tried to allocate")
	DeviceFree  uint64 // cudaMemGetInfo free bytes at the failure
	DeviceTotal uint64
	Allowed     uint64 // the memory-fraction limit, when Limited
	Limited     bool   // a memory fraction is set (even one giving 0 bytes)
	Allocated   uint64 // allocated_bytes.all.current
	Reserved    uint64 // reserved_bytes.all.current
	// TooLarge marks a request of at least 2^60 bytes, refused before the
	// allocator looks at it (no trace entry, not counted in num_ooms).
	TooLarge bool
	// Processes are the processes using the GPU at the failure, when the
	// device can list them (ProcessLister; PyTorch asks NVML): the
	// message's "Process N has X memory in use." clauses.
	Processes []ProcessMemory
}

// ProcessMemory is one process's use of the GPU, as NVML reports it
// (nvmlDeviceGetComputeRunningProcesses): its context and all it holds.
type ProcessMemory struct {
	PID  int
	Used uint64
	Self bool // the process whose allocator failed
}

// ProcessLister is the optional Device capability behind the message's
// per-process clauses: the processes on the GPU now, in the order NVML
// lists them. A device without it gives the message without them, as
// PyTorch does without NVML.
type ProcessLister interface {
	ComputeProcesses() []ProcessMemory
}

// Error returns PyTorch 2.2-2.9's message; the per-process clauses are
// there when the device listed its processes (Processes).
func (e *OutOfMemoryError) Error() string {
	if e.TooLarge {
		return "CUDA out of memory. Tried to allocate more than 1EB memory."
	}
	allowed := ""
	if e.Limited {
		allowed = FormatSize(e.Allowed) + " allowed; "
	}
	procs := ""
	for _, p := range e.Processes {
		if p.Self {
			procs += "Including non-PyTorch memory, this process has " + FormatSize(p.Used) + " memory in use. "
		} else {
			procs += fmt.Sprintf("Process %d has %s memory in use. ", p.PID, FormatSize(p.Used))
		}
	}
	return fmt.Sprintf("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. %s%s"+
		"Of the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. "+
		"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "+
		"See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
		FormatSize(e.AllocSize), e.Device, FormatSize(e.DeviceTotal), FormatSize(e.DeviceFree), procs, allowed,
		FormatSize(e.Allocated), FormatSize(e.Reserved-e.Allocated))
}

// Is makes errors.Is(err, ErrOutOfMemory) hold.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// ErrOutOfMemory matches every *OutOfMemoryError with errors.Is.
var ErrOutOfMemory = errors.New("CUDA out of memory")

// Errors for misuse of the API; each names what was wrong.
var (
	ErrNotAllocated = errors.New("allocator: block is not allocated (double free or stale pointer)")
	ErrForeignBlock = errors.New("allocator: block belongs to another allocator")
	ErrUnsupported  = errors.New("allocator: unsupported setting")
	ErrDiscarded    = errors.New("allocator: used after Discard")
)

// FormatSize renders bytes as PyTorch's format_size does: "n bytes" up to
// 1024, then KiB, MiB, GiB with two decimals; the bounds are inclusive, so
// 1 MiB prints as "1024.00 KiB".
func FormatSize(n uint64) string {
	switch {
	case n <= 1024:
		return strconv.FormatUint(n, 10) + " bytes"
	case n <= 1<<20:
		return strconv.FormatFloat(float64(n)/1024, 'f', 2, 64) + " KiB"
	case n <= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 2, 64) + " MiB"
	default:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
	}
}

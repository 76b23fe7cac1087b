package cuda

import (
	"errors"
	"fmt"

	"github.com/memreplay/memreplay/allocator"
)

// Errors of Open and of a Device used wrongly. Driver call failures are
// *allocator.DeviceError values instead (see deviceError).
var (
	// ErrNoCgo: the binary was built with CGO_ENABLED=0 and cannot load a
	// driver.
	ErrNoCgo = errors.New("cuda: built without cgo; rebuild with CGO_ENABLED=1 (and a C compiler) to use a real GPU")
	// ErrNoDriver: the driver library could not be loaded (not installed,
	// or not a CUDA driver). The message names the path and dlopen's reason.
	ErrNoDriver = errors.New("cuda: cannot load the CUDA driver")
	// ErrNoDevice: the driver loaded but sees no GPU, or not the one asked
	// for.
	ErrNoDevice = errors.New("cuda: no such CUDA device")
	// ErrClosed: a call on a Device after Close.
	ErrClosed = errors.New("cuda: device is closed")
)

// CUresult values the Go side looks at (cudadecl.h has the C names).
const (
	codeOutOfMemory    = 2
	codeNotInitialized = 3
	codeNoDevice       = 100
	codeInvalidDevice  = 101
	codeNotReady       = 600
)

// stickyCodes are the CUresult values after which, in NVIDIA's words (the
// cudaError_enum documentation in cuda.h), "the process is in an
// inconsistent state and any further CUDA work will return the same error.
// To continue using CUDA, the process must be terminated and relaunched."
// CUDA_ERROR_ASSERT says the same in other words ("The context cannot be
// used anymore, and must be destroyed").
var stickyCodes = map[int]bool{
	226: true, // CUDA_ERROR_CONTAINED
	700: true, // CUDA_ERROR_ILLEGAL_ADDRESS
	702: true, // CUDA_ERROR_LAUNCH_TIMEOUT
	710: true, // CUDA_ERROR_ASSERT
	714: true, // CUDA_ERROR_HARDWARE_STACK_ERROR
	715: true, // CUDA_ERROR_ILLEGAL_INSTRUCTION
	716: true, // CUDA_ERROR_MISALIGNED_ADDRESS
	717: true, // CUDA_ERROR_INVALID_ADDRESS_SPACE
	718: true, // CUDA_ERROR_INVALID_PC
	719: true, // CUDA_ERROR_LAUNCH_FAILED
	721: true, // CUDA_ERROR_TENSOR_MEMORY_LEAK
	810: true, // CUDA_ERROR_MPS_CLIENT_TERMINATED
	911: true, // CUDA_ERROR_EXTERNAL_DEVICE
}

// IsStickyCode reports whether a CUresult leaves the context unusable.
func IsStickyCode(code int) bool { return stickyCodes[code] }

// deviceError describes the failure rc of op at step by the driver's own
// names: the Error text reads
// "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
// Out of memory satisfies allocator.ErrDeviceOutOfMemory and the sticky
// codes allocator.ErrFatal.
func (l *lib) deviceError(op, rc, step int) *allocator.DeviceError {
	name, msg := l.errorText(rc)
	if name == "" {
		name = fmt.Sprintf("CUresult %d", rc)
	}
	return &allocator.DeviceError{
		Call:   callName(op, step),
		Code:   rc,
		Name:   name,
		Msg:    msg,
		Sticky: stickyCodes[rc],
		OOM:    rc == codeOutOfMemory,
	}
}

// withCall renames the failed call, for calls made outside mr_do.
func withCall(e *allocator.DeviceError, call string) *allocator.DeviceError {
	e.Call = call
	return e
}

package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/memreplay/memreplay/allocator"
)

// ErrClosed is returned (wrapped) by every device call on a closed process.
// It is not a DeviceError: a real process that has exited makes no calls, so
// there is no driver error to imitate, only a bug in the caller.
var ErrClosed = errors.New("sim: process is closed")

// Error codes, shared by the runtime (cudaError_t) and the driver (CUresult)
// where both define them.
const (
	codeInvalidValue   = 1
	codeOutOfMemory    = 2
	codeInvalidHandle  = 400
	codeIllegalAddress = 700
	codeAssert         = 710
	codeUnknown        = 999
)

// errName is one error in both spellings. Runtime calls (cudaMalloc) report
// cudaError names and driver calls (cuMemCreate) CUDA_ERROR names, and the
// same sticky fault shows up under both in one process, so both are kept.
type errName struct {
	code    int
	runtime string
	driver  string
	msg     string
}

var (
	errInvalidValue  = errName{codeInvalidValue, "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", "invalid argument"}
	errOutOfMemory   = errName{codeOutOfMemory, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"}
	errInvalidHandle = errName{codeInvalidHandle, "cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"}
	errUnknown       = errName{codeUnknown, "cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error"}
)

// stickyErrors are the errors after which CUDA declares the context
// unusable: faults raised by kernels, which a trainer sees at the next call
// whatever that call is.
var stickyErrors = []errName{
	{codeIllegalAddress, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{codeAssert, "cudaErrorAssert", "CUDA_ERROR_ASSERT", "device-side assert triggered"},
	{714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	{715, "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	{716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{717, "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	{718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "invalid program counter"},
	{719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
}

// lookupSticky finds a sticky error by either spelling. An unknown name is
// kept as given with cudaErrorUnknown's code, so a test can name any fault.
func lookupSticky(name string) errName {
	if name == "" {
		return stickyErrors[1] // a device-side assert, the BERT-family study's failure
	}
	for _, e := range stickyErrors {
		if name == e.runtime || name == e.driver {
			return e
		}
	}
	return errName{code: codeUnknown, runtime: name, driver: name, msg: errUnknown.msg}
}

// isDriverCall tells driver API calls (cuMemCreate) from runtime calls
// (cudaMalloc), which name their errors differently.
func isDriverCall(c Call) bool {
	s := string(c)
	return strings.HasPrefix(s, "cu") && !strings.HasPrefix(s, "cuda")
}

// deviceError builds the error call c returns for e; detail, when given,
// replaces the driver's terse description so that misuse says what was
// wrong.
func deviceError(c Call, e errName, detail string, args ...any) *allocator.DeviceError {
	name := e.runtime
	if isDriverCall(c) {
		name = e.driver
	}
	msg := e.msg
	if detail != "" {
		msg = fmt.Sprintf(detail, args...)
	}
	return &allocator.DeviceError{
		Call: string(c),
		Code: e.code,
		Name: name,
		Msg:  msg,
		OOM:  e.code == codeOutOfMemory,
	}
}

// invalid is the error for an argument the driver would reject.
func invalid(c Call, detail string, args ...any) error {
	return deviceError(c, errInvalidValue, detail, args...)
}

// oom is the error for an allocation the memory cannot hold.
func oom(c Call) error {
	return deviceError(c, errOutOfMemory, "")
}

// noAddressSpace is the error of a call that finds no room for size bytes
// in the process's address window: the driver's CUDA_ERROR_OUT_OF_MEMORY,
// named for what it is (allocator.ErrAddressSpaceExhausted) and not out
// of memory.
func (p *Process) noAddressSpace(c Call, size uint64) error {
	e := deviceError(c, errOutOfMemory, "virtual address space exhausted: no room for %d bytes in the process's window of %d bytes "+
		"(%d reserved); the simulated device's address space (gpu.Options.AddressSpace) is too small for this workload",
		size, p.gpu.window, p.gpu.window-p.va.freeBytes())
	e.OOM, e.NoAddressSpace = false, true
	return e
}

// Package cuda is the real GPU behind the allocator: an allocator.Device
// (and allocator.VirtualMemory, for expandable segments) that calls the
// CUDA driver API, the counterpart of the simulator's gpu.Process.
//
// # Reaching the driver
//
// The driver is loaded at run time with dlopen("libcuda.so.1") (or the path
// in MEMREPLAY_LIBCUDA, or WithLibrary), never linked: building needs only
// cgo and a C compiler, no CUDA toolkit, and the same binary runs on
// machines without a GPU, where Open returns ErrNoDriver or ErrNoDevice
// instead of failing to start. cudadecl.h declares the handful of driver
// types and values used, with the layouts of NVIDIA's cuda.h; shim.h
// resolves the entry points by their exported, versioned names
// (cuMemAlloc_v2, cuMemGetInfo_v2, cuEventDestroy_v2, ...: the names
// cuda.h's #defines turn the plain names into) into a table. Built with
// CGO_ENABLED=0 the package still compiles and Open returns ErrNoCgo.
//
// # One cgo call per operation
//
// Every operation is a single call of the C dispatcher mr_do, which makes
// the device's primary context current on the calling thread
// (cuCtxGetCurrent, plus cuCtxSetCurrent when another context is current)
// and then calls the driver. A CUDA context is current per OS thread, and
// goroutines move between threads between any two Go statements, but never
// during a C call; so setting the context inside the same C call as the
// operation is correct on whatever thread the goroutine runs, with no
// runtime.LockOSThread, and it tolerates other code (PyTorch, when the
// library is loaded into a trainer) changing the thread's context between
// our calls. Device handles cross the boundary as integers and are turned
// into pointers in C, so Go never manufactures an unsafe.Pointer.
//
// # Contexts and lifetime
//
// A Device retains the device's primary context (cuDevicePrimaryCtxRetain),
// the one the CUDA runtime and PyTorch use, so memory it allocates is
// usable by kernels of the same process; Close releases it. The driver
// frees everything of a context when its last reference goes.
//
// # Errors
//
// A failed call returns an *allocator.DeviceError naming the entry point
// and CUDA's error name and text ("cuMemAlloc_v2 failed:
// CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"). CUDA_ERROR_OUT_OF_MEMORY
// satisfies errors.Is(err, allocator.ErrDeviceOutOfMemory), so the
// allocator runs its free-and-retry chain; the sticky errors (illegal
// address, device-side assert, launch failure, ...: stickyCodes) satisfy
// allocator.ErrFatal, after which the allocator refuses work and the trial
// runner restarts the worker process.
//
// # Events
//
// RecordEvent takes an event from a per-Device pool (cuEventCreate with
// CU_EVENT_DISABLE_TIMING only when the pool is empty) and records it;
// once QueryEvent has seen it complete, or SynchronizeEvent waited for it,
// it returns to the pool, as PyTorch's EventPool does, so steady state
// makes no create/destroy calls.
//
// # Testing
//
// testdata/fakecuda.c is a fake driver: the same entry points over host
// memory, with configurable capacity, fault injection and counters. The
// tests compile it with the system C compiler and load it through the very
// dlopen path a real driver takes; see docs/cuda.md.
package cuda

import (
	"fmt"
	"os"
)

// LibraryEnv names the environment variable that overrides the driver
// library's path.
const LibraryEnv = "MEMREPLAY_LIBCUDA"

// DefaultLibrary is the driver's soname, found by the dynamic loader.
const DefaultLibrary = "libcuda.so.1"

// Option configures Open.
type Option func(*options)

type options struct{ path string }

// WithLibrary loads the driver from path instead of MEMREPLAY_LIBCUDA or
// libcuda.so.1.
func WithLibrary(path string) Option { return func(o *options) { o.path = path } }

// Driver is a loaded and initialised CUDA driver.
type Driver struct {
	lib *lib
}

// Open loads the driver library and initialises it (cuInit). With no GPU,
// no driver or no cgo it returns one error saying which (ErrNoDevice,
// ErrNoDriver, ErrNoCgo wrapped), never crashes.
func Open(opts ...Option) (*Driver, error) {
	o := options{path: os.Getenv(LibraryEnv)}
	for _, f := range opts {
		f(&o)
	}
	if o.path == "" {
		o.path = DefaultLibrary
	}
	if !cgoEnabled {
		return nil, ErrNoCgo
	}
	l, err := loadLib(o.path)
	if err != nil {
		return nil, fmt.Errorf("%w (set %s to the driver's path)", err, LibraryEnv)
	}
	d := &Driver{lib: l}
	if _, _, rc, step := l.do(0, opInit, 0, 0, 0); rc != 0 {
		err := l.deviceError(opInit, rc, step)
		if rc == codeNoDevice {
			return nil, fmt.Errorf("%w: %s has no GPU to offer: %v", ErrNoDevice, o.path, err)
		}
		return nil, fmt.Errorf("cuda: initialising %s: %w", o.path, err)
	}
	return d, nil
}

// Path returns the library the driver was loaded from.
func (d *Driver) Path() string { return d.lib.path }

// Version returns the driver's CUDA version as 1000*major + 10*minor
// (cuDriverGetVersion).
func (d *Driver) Version() (int, error) {
	v, _, rc, step := d.lib.do(0, opDriverVersion, 0, 0, 0)
	if rc != 0 {
		return 0, d.lib.deviceError(opDriverVersion, rc, step)
	}
	return int(v), nil
}

// DeviceCount returns how many GPUs the driver sees (cuDeviceGetCount).
func (d *Driver) DeviceCount() (int, error) {
	n, _, rc, step := d.lib.do(0, opDeviceCount, 0, 0, 0)
	if rc != 0 {
		return 0, d.lib.deviceError(opDeviceCount, rc, step)
	}
	return int(n), nil
}

// hook calls one of the fake driver's test controls; see fake_test.go.
func (d *Driver) hook(fn, s string, a, b, c int64) (int64, error) { return d.lib.hook(fn, s, a, b, c) }

//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// lib is one loaded driver library: the C table of its entry points.
type lib struct {
	c    *C.mr_lib
	path string
}

// libs caches loaded libraries by path. A library is never unloaded (the
// real libcuda must not be), so one table per path serves every Open.
var libs struct {
	sync.Mutex
	m map[string]*lib
}

// loadLib dlopens path and resolves the driver's entry points.
func loadLib(path string) (*lib, error) {
	libs.Lock()
	defer libs.Unlock()
	if l, ok := libs.m[path]; ok {
		return l, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	c := C.mr_open(cpath, &buf[0], C.size_t(len(buf)))
	if c == nil {
		return nil, fmt.Errorf("%w %q: %s", ErrNoDriver, path, C.GoString(&buf[0]))
	}
	l := &lib{c: c, path: path}
	if libs.m == nil {
		libs.m = map[string]*lib{}
	}
	libs.m[path] = l
	return l, nil
}

// do runs one operation (see shim.h's mr_do): one cgo call, which makes
// ctx current on this thread first for the operations that need it.
func (l *lib) do(ctx uintptr, op int, x, y, z uint64) (a, b uint64, rc, step int) {
	r := C.mr_do(l.c, C.uintptr_t(ctx), C.int(op), C.ulonglong(x), C.ulonglong(y), C.ulonglong(z))
	return uint64(r.a), uint64(r.b), int(r.rc), int(r.step)
}

// errorText is cuGetErrorName and cuGetErrorString of rc; empty strings
// where the driver does not know the code.
func (l *lib) errorText(rc int) (name, msg string) {
	var n, m *C.char
	C.mr_error_text(l.c, C.CUresult(rc), &n, &m)
	if n != nil {
		name = C.GoString(n)
	}
	if m != nil {
		msg = C.GoString(m)
	}
	return name, msg
}

// deviceName is cuDeviceGetName.
func (l *lib) deviceName(dev int) (string, int) {
	var buf [256]C.char
	rc := C.mr_device_name(l.c, C.int(dev), &buf[0], C.int(len(buf)))
	if rc != 0 {
		return "", int(rc)
	}
	return C.GoString(&buf[0]), 0
}

// hook calls fn, a function the library exports beyond the driver API
// (the fake driver's test controls), as long long fn(const char *s,
// long long a, long long b, long long c).
func (l *lib) hook(fn, s string, a, b, c int64) (int64, error) {
	cfn := C.CString(fn)
	defer C.free(unsafe.Pointer(cfn))
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	var rc C.CUresult
	v := C.mr_hook(l.c, cfn, cs, C.longlong(a), C.longlong(b), C.longlong(c), &rc)
	if rc != 0 {
		return 0, fmt.Errorf("cuda: %s does not export %s", l.path, fn)
	}
	return int64(v), nil
}

// repeat runs n operations in one cgo call (shim.h's mr_repeat): n
// cuMemGetInfo_v2 with size 0, else n malloc+free pairs of size bytes.
// Benchmarks compare it with n calls from Go to isolate cgo's cost.
func (l *lib) repeat(ctx uintptr, n int, size uint64) int {
	return int(C.mr_repeat(l.c, C.uintptr_t(ctx), C.longlong(n), C.ulonglong(size)))
}

// shimOpcodes returns the C enum's values in the order of ops.go, for the
// test that keeps the two in step.
func shimOpcodes() []int {
	return []int{C.MR_OP_INIT, C.MR_OP_DRIVER_VERSION, C.MR_OP_DEVICE_COUNT, C.MR_OP_DEVICE_GET,
		C.MR_OP_TOTAL_MEM, C.MR_OP_ATTRIBUTE, C.MR_OP_PRIMARY_RETAIN, C.MR_OP_PRIMARY_RELEASE,
		C.MR_OP_CTX_SYNC, C.MR_OP_MALLOC, C.MR_OP_FREE, C.MR_OP_MEMINFO, C.MR_OP_GRANULARITY,
		C.MR_OP_RESERVE, C.MR_OP_ADDRESS_FREE, C.MR_OP_CREATE, C.MR_OP_MAP, C.MR_OP_SET_ACCESS,
		C.MR_OP_UNMAP, C.MR_OP_RELEASE, C.MR_OP_EVENT_CREATE, C.MR_OP_EVENT_RECORD,
		C.MR_OP_EVENT_QUERY, C.MR_OP_EVENT_SYNC, C.MR_OP_EVENT_DESTROY, C.MR_OP_STREAM_SYNC,
		C.MR_OP_LAST, C.MR_STEP_GET_CURRENT, C.MR_STEP_SET_CURRENT, C.MR_STEP_CALL}
}

// cgoEnabled reports whether this build can reach a driver at all.
const cgoEnabled = true

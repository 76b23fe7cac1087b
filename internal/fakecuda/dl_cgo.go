//go:build cgo

package fakecuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef long long (*fakecuda_ctl)(const char *, long long, long long, long long);

static void *fc_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *fc_error(void) { const char *e = dlerror(); return e ? e : "dlopen failed"; }
static void *fc_sym(void *h, const char *name) { return dlsym(h, name); }
static long long fc_call(void *f, const char *s, long long a, long long b, long long c) {
	fakecuda_ctl fn;
	memcpy(&fn, &f, sizeof fn);
	return fn(s, a, b, c);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

const cgoEnabled = true

type handle struct {
	path string
	h    unsafe.Pointer
}

func dlopen(path string) (*handle, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	h := C.fc_open(cp)
	if h == nil {
		return nil, fmt.Errorf("fakecuda: dlopen %s: %s", path, C.GoString(C.fc_error()))
	}
	return &handle{path: path, h: h}, nil
}

func (l *handle) call(fn, s string, a, b, c int64) (int64, error) {
	cfn := C.CString(fn)
	defer C.free(unsafe.Pointer(cfn))
	f := C.fc_sym(l.h, cfn)
	if f == nil {
		return 0, fmt.Errorf("fakecuda: %s has no %s (not the fake driver?)", l.path, fn)
	}
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	return int64(C.fc_call(f, cs, C.longlong(a), C.longlong(b), C.longlong(c))), nil
}

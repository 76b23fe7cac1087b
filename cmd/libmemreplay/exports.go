//go:build cgo

package main

// The Go side of the exported functions. Each is a thin wrapper over the
// library (lib.go) taking integers, called by the C functions of shim.c that
// carry PyTorch's signatures: pointers cross as uintptr_t and become
// pointers in C, so Go never makes an unsafe.Pointer from an address.
// Every wrapper recovers a panic and turns it into last_error, so nothing
// unwinds into the C caller.

/*
#cgo CFLAGS: -fexceptions
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include <string.h>
#include "memreplay.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/memreplay/memreplay/allocator/cuda"
)

// global is the library behind the exported functions, built from the
// environment at the first call.
var (
	global     atomic.Pointer[library]
	globalOnce sync.Once
)

func lib() *library {
	if l := global.Load(); l != nil {
		return l
	}
	globalOnce.Do(func() {
		o := optionsFromEnv(lookupEnv)
		if path, ok := lookupEnv(cuda.LibraryEnv); ok && path != "" {
			o.open = func() (*cuda.Driver, error) { return cuda.Open(cuda.WithLibrary(path)) }
		}
		l := newLibrary(o)
		global.Store(l)
		if l.q != nil {
			l.q.publish() // memreplay_free queues from now on
		}
	})
	return global.Load()
}

// lookupEnv reads the process's environment as it is now, through C's
// getenv. Go's os.Getenv would not do: in a shared library the Go runtime
// copies the environment the process started with, so it misses what the
// host set later (Python's os.environ[...] = ..., before the first CUDA
// tensor, is the usual way to configure the library).
func lookupEnv(key string) (string, bool) {
	k := C.CString(key)
	defer C.free(unsafe.Pointer(k))
	v := C.getenv(k)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

// recovered turns a panic into an error in last_error. It must be called
// directly by the deferred function.
func recovered(what string, r any) {
	err := fmt.Errorf("internal error in %s: %v", what, r)
	if l := global.Load(); l != nil {
		l.fail(err)
	} else {
		fmt.Fprintf(os.Stderr, "memreplay: %v\n", err)
	}
}

// copyOut writes s, truncated and NUL-terminated, into the C buffer buf of
// n bytes.
func copyOut(buf *C.char, n C.size_t, s string) {
	if buf == nil || n == 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

// mrgo_malloc stores the pointer at *ptr (0 for a size of 0 or a
// failure). When the malloc failed and the library throws on failure
// (MEMREPLAY_OOM, default throw), it stores the message, in malloc'd
// memory, at *throw for the C side to throw and free. A successful malloc
// allocates nothing. Both go through C memory rather than as results
// because cgo checks every result of an exported function at each call
// (about 3 ns here).
//
//export mrgo_malloc
func mrgo_malloc(size uint64, device int32, stream uintptr, ptr *uintptr, throw **C.char) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_malloc", r)
			*ptr = 0
			if l := global.Load(); l != nil && l.opt.oomThrow {
				*throw = C.CString(fmt.Sprintf("memreplay: internal error in memreplay_malloc: %v", r))
			}
		}
	}()
	l := lib()
	p, err := l.malloc(size, int(device), stream)
	*ptr = p
	if err != nil && l.opt.oomThrow {
		*throw = C.CString(throwMessage(err))
	}
}

// mrgo_free is memreplay_free when it enters Go: before the library
// exists, while recording, or when the queue of deferred frees is full.
// device is free's device argument, the table to look in first.
//
//export mrgo_free
func mrgo_free(ptr uintptr, device int32) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_free", r)
		}
	}()
	lib().freeOn(ptr, int(device))
}

//export mrgo_init
func mrgo_init(deviceCount int32) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_init", r)
		}
	}()
	lib().init(int(deviceCount))
}

//export mrgo_empty_cache
func mrgo_empty_cache() {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_empty_cache", r)
		}
	}()
	lib().emptyCache()
}

//export mrgo_set_memory_fraction
func mrgo_set_memory_fraction(fraction float64, device int32) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_set_memory_fraction", r)
		}
	}()
	lib().setMemoryFraction(fraction, int(device))
}

//export mrgo_record_stream
func mrgo_record_stream(ptr, stream uintptr) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_record_stream", r)
		}
	}()
	lib().recordStream(ptr, stream)
}

//export mrgo_stats_json
func mrgo_stats_json(device int32) (out *C.char) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_stats_json", r)
			out = nil
		}
	}()
	b, err := lib().statsJSON(int(device))
	if err != nil {
		return nil
	}
	// C.CString copies into malloc'd memory; memreplay_free_string frees it.
	return C.CString(string(b))
}

//export mrgo_write_trace
func mrgo_write_trace(path *C.char) (rc int32) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_write_trace", r)
			rc = -1
		}
	}()
	if lib().writeTrace(goString(path)) != nil {
		return 1
	}
	return 0
}

//export mrgo_write_snapshot
func mrgo_write_snapshot(path *C.char) (rc int32) {
	defer func() {
		if r := recover(); r != nil {
			recovered("memreplay_write_snapshot", r)
			rc = -1
		}
	}()
	if lib().writeSnapshot(goString(path)) != nil {
		return 1
	}
	return 0
}

//export mrgo_last_error
func mrgo_last_error(buf *C.char, n C.size_t) {
	defer func() {
		if r := recover(); r != nil {
			copyOut(buf, n, "memreplay: internal error in memreplay_last_error")
		}
	}()
	copyOut(buf, n, lib().lastError())
}

func goString(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

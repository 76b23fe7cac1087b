// Package fakecuda builds allocator/cuda's fake CUDA driver
// (allocator/cuda/testdata/fakecuda.c, described in docs/cuda.md) for the
// tests of other packages, and reaches its test controls: the replay's
// real-GPU backend (sim/replay/realgpu) and the CLI's --device cuda are
// tested on it, as allocator/cuda is.
//
// The fake is one shared library per process: a test binary builds it once
// (Build), loads it through cuda.Open(cuda.WithLibrary(path)) or
// MEMREPLAY_LIBCUDA, and reaches the same copy here (Open dlopens the same
// path, which the dynamic loader resolves to the library already loaded).
// Its state is process-global, so tests that use it must not run in
// parallel with each other.
//
// Only tests import this package. Built without cgo it still compiles, and
// Build reports why the fake cannot be used (a skip).
package fakecuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Source returns the fake's C source and the directory of the headers it
// includes (allocator/cuda), found from this file's location or, failing
// that, from the working directory up to go.mod.
func Source() (src, include string, err error) {
	var roots []string
	if _, file, _, ok := runtime.Caller(0); ok {
		roots = append(roots, filepath.Join(filepath.Dir(file), "..", ".."))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				roots = append(roots, d)
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, r := range roots {
		include = filepath.Join(r, "allocator", "cuda")
		src = filepath.Join(include, "testdata", "fakecuda.c")
		if _, err := os.Stat(src); err == nil {
			return src, include, nil
		}
	}
	return "", "", fmt.Errorf("fakecuda: allocator/cuda/testdata/fakecuda.c not found (from %v)", roots)
}

// Build compiles the fake driver into dir/libfakecuda.so with the system C
// compiler ($CC, else gcc, else cc), as allocator/cuda's tests do. skip is
// set, and path empty, where it cannot be built here (no cgo, no
// compiler): the caller skips and says so. err is a compiler that failed on
// the source: the caller fails.
func Build(dir string) (path, skip string, err error) {
	if !cgoEnabled {
		return "", "built without cgo: the fake CUDA driver cannot be loaded", nil
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		if _, err2 := exec.LookPath("cc"); err2 != nil {
			return "", fmt.Sprintf("no C compiler (%s, cc) to build the fake CUDA driver", cc), nil
		}
		cc = "cc"
	}
	src, include, err := Source()
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "libfakecuda.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
		"-I"+include, "-o", path, src, "-lpthread").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("fakecuda: %s %s: %v\n%s", cc, src, err, out)
	}
	return path, "", nil
}

// Controls reaches the fake's test controls (fakecuda.c's header comment
// lists them). They are not driver calls: the fake does not count them.
type Controls struct {
	lib *handle
}

// Open loads the fake at path (the copy already loaded, if any) and returns
// its controls.
func Open(path string) (*Controls, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	return &Controls{lib: h}, nil
}

func (c *Controls) call(fn, s string, a, b, x int64) (int64, error) {
	return c.lib.call(fn, s, a, b, x)
}

// Reset drops everything the fake holds and zeroes its counters: an empty
// device of capacity bytes, with the VMM granularity and the context
// overhead given (0: 2 MiB and none). The capacity must be at most an
// eighth of the fake's arena (1 TiB unless FAKECUDA_CAPACITY was larger at
// the first cuInit).
func (c *Controls) Reset(capacity, granularity, context uint64) error {
	v, err := c.call("fakecuda_reset", "", int64(capacity), int64(granularity), int64(context))
	if err == nil && v != 0 {
		err = fmt.Errorf("fakecuda_reset(%d, %d, %d) = %d", capacity, granularity, context, v)
	}
	return err
}

// Count returns how many times the driver entry point fn was called since
// the reset (failed calls included); -1 for an unknown name.
func (c *Controls) Count(fn string) int64 {
	v, _ := c.call("fakecuda_count", fn, 0, 0, 0)
	return v
}

// Failures returns how many calls of fn failed since the reset.
func (c *Controls) Failures(fn string) int64 {
	v, _ := c.call("fakecuda_count", fn, 1, 0, 0)
	return v
}

// Fail makes the nth call of fn from now fail with code, once (a sticky
// code corrupts the context from that call on).
func (c *Controls) Fail(fn string, nth, code int) error {
	v, err := c.call("fakecuda_fail", fn, int64(nth), int64(code), 0)
	if err == nil && v != 0 {
		err = fmt.Errorf("fakecuda_fail(%s, %d, %d) = %d", fn, nth, code, v)
	}
	return err
}

// Sticky corrupts the context with code from the (after+1)th context call
// from now on, until its last reference is released.
func (c *Controls) Sticky(code, after int) error {
	_, err := c.call("fakecuda_sticky", "", int64(code), int64(after), 0)
	return err
}

// CompleteAll completes every event recorded so far, as an idle GPU does
// at once (the fake's events otherwise complete only when synchronised).
func (c *Controls) CompleteAll() error {
	_, err := c.call("fakecuda_complete", "", 0, 1, 0)
	return err
}

// Stat reads one of the fake's figures: "used" (bytes), "capacity",
// "pending" (incomplete events), "live" (allocations, pages, reservations
// and events in existence), "arena", "arena_size"; -1 for an unknown name.
func (c *Controls) Stat(name string) int64 {
	v, _ := c.call("fakecuda_stat", name, 0, 0, 0)
	return v
}

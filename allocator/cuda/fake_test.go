package cuda

// The fake driver (testdata/fakecuda.c), compiled once per test binary with
// the system C compiler and loaded through Open's dlopen path, and the Go
// side of its test controls.

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/internal/fakecuda"
)

// fakeLib is the built fake driver's path; empty when it could not be
// built, with fakeSkip saying why.
var fakeLib, fakeSkip string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakecuda")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fakeLib, fakeSkip = buildFake(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildFake compiles the fake driver into dir (internal/fakecuda.Build). A
// machine without a C compiler (or a build without cgo) skips the tests
// that need it, saying so; a compiler that fails on the source is a test
// failure, reported by every such test.
func buildFake(dir string) (path, skip string) {
	path, skip, err := fakecuda.Build(dir)
	if err != nil {
		return "", "BUILD FAILED: " + err.Error()
	}
	return path, skip
}

// fake is a handle on the fake driver's test controls.
type fake struct {
	t   testing.TB
	drv *Driver
}

// needFake returns the loaded fake driver, reset to an empty device of
// capacity bytes with the given VMM granularity and context overhead (0:
// 2 MiB and none). It skips the test where the fake cannot be built.
func needFake(t testing.TB, capacity, granularity, context uint64) *fake {
	t.Helper()
	if fakeLib == "" {
		if len(fakeSkip) > 12 && fakeSkip[:12] == "BUILD FAILED" {
			t.Fatal(fakeSkip)
		}
		t.Skip(fakeSkip)
	}
	drv, err := Open(WithLibrary(fakeLib))
	require.NoError(t, err)
	f := &fake{t: t, drv: drv}
	f.reset(capacity, granularity, context)
	return f
}

func (f *fake) hook(fn, s string, a, b, c int64) int64 {
	f.t.Helper()
	v, err := f.drv.hook(fn, s, a, b, c)
	require.NoError(f.t, err)
	return v
}

func (f *fake) reset(capacity, granularity, context uint64) {
	f.t.Helper()
	require.Zero(f.t, f.hook("fakecuda_reset", "", int64(capacity), int64(granularity), int64(context)),
		"fakecuda_reset(%d, %d, %d)", capacity, granularity, context)
}

// device opens ordinal 0 on the fake; Close runs at the end of the test.
func (f *fake) device() *Device {
	f.t.Helper()
	d, err := f.drv.Device(0)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { d.Close() })
	return d
}

// fail makes the nth call of fn from now fail with code, once.
func (f *fake) fail(fn string, nth int, code int) {
	f.t.Helper()
	require.Zero(f.t, f.hook("fakecuda_fail", fn, int64(nth), int64(code), 0), "fakecuda_fail(%s)", fn)
}

// sticky corrupts the context with code from the (after+1)th context call
// from now on.
func (f *fake) sticky(code, after int) { f.hook("fakecuda_sticky", "", int64(code), int64(after), 0) }

// count is how many times fn was called since the reset.
func (f *fake) count(fn string) int64 {
	f.t.Helper()
	n := f.hook("fakecuda_count", fn, 0, 0, 0)
	require.GreaterOrEqual(f.t, n, int64(0), "unknown fake function %s", fn)
	return n
}

// failures is how many calls of fn failed since the reset.
func (f *fake) failures(fn string) int64 { return f.hook("fakecuda_count", fn, 1, 0, 0) }

func (f *fake) completeStream(s uint64) { f.hook("fakecuda_complete", "", int64(s), 0, 0) }
func (f *fake) completeAll()            { f.hook("fakecuda_complete", "", 0, 1, 0) }

// stat reads one of the fake's figures: used, capacity, pending, live,
// arena, arena_size.
func (f *fake) stat(name string) uint64 {
	f.t.Helper()
	v := f.hook("fakecuda_stat", name, 0, 0, 0)
	require.GreaterOrEqual(f.t, v, int64(0), "fakecuda_stat(%s)", name)
	return uint64(v)
}

// clearCurrent leaves no context current on the calling OS thread.
func (f *fake) clearCurrent() { f.hook("fakecuda_clear_current", "", 0, 0, 0) }

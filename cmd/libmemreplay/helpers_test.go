package main

// What the tests build and run: the fake CUDA driver of allocator/cuda
// (testdata/fakecuda.c there), libmemreplay.so itself (go build
// -buildmode=c-shared, the slow step: once per test binary, and only when a
// test needs it), the C harness and the C++ harness (testdata/), each
// compiled with the system compiler. A machine without a C compiler, or a
// build without cgo, skips what needs them and says so; a compiler or a
// build that fails on the sources fails the tests that need them.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/cuda"
	"github.com/memreplay/memreplay/internal/fakecuda"
)

var workDir string // temporary directory of the built artifacts

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "libmemreplay-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	workDir = dir
	// The fake driver reads its capacity at its first cuInit; the
	// in-process tests share that one fake.
	os.Setenv("FAKECUDA_CAPACITY", fmt.Sprint(inProcCapacity))
	os.Setenv("FAKECUDA_DEVICES", "2")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// inProcCapacity is the fake device's memory for the in-process tests.
const inProcCapacity = 4 << 30

// artifact is something built once, on first need.
type artifact struct {
	once sync.Once
	path string
	skip string // why it cannot be built here (a skip)
	fail string // why its build failed (a failure)
}

func (a *artifact) need(t testing.TB, build func() (path, skip, fail string)) string {
	t.Helper()
	a.once.Do(func() { a.path, a.skip, a.fail = build() })
	switch {
	case a.fail != "":
		t.Fatal(a.fail)
	case a.skip != "":
		t.Skip(a.skip)
	}
	return a.path
}

var fakeLib, sharedLib, harness, harnessCxx, harnessCxxLib, harnessPyHost artifact

// compiler returns the C (or C++) compiler: $CC/$CXX, else gcc/g++, else
// cc/c++.
func compiler(cxx bool) (string, bool) {
	env, first, second := "CC", "gcc", "cc"
	if cxx {
		env, first, second = "CXX", "g++", "c++"
	}
	if c := os.Getenv(env); c != "" {
		if _, err := exec.LookPath(c); err == nil {
			return c, true
		}
	}
	for _, c := range []string{first, second} {
		if _, err := exec.LookPath(c); err == nil {
			return c, true
		}
	}
	return "", false
}

func compile(cxx bool, out string, args ...string) (path, skip, fail string) {
	if !cgoEnabled {
		return "", "built without cgo: libmemreplay has no C side", ""
	}
	cc, ok := compiler(cxx)
	if !ok {
		what := "C"
		if cxx {
			what = "C++"
		}
		return "", "no " + what + " compiler to build the test programs", ""
	}
	path = filepath.Join(workDir, out)
	cmd := exec.Command(cc, append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-o", path}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Sprintf("BUILD FAILED: %s %s: %v\n%s", cc, strings.Join(cmd.Args[1:], " "), err, b)
	}
	return path, "", ""
}

// needFake builds the fake CUDA driver (internal/fakecuda, as
// allocator/cuda's tests do; docs/cuda.md).
func needFake(t testing.TB) string {
	return fakeLib.need(t, func() (string, string, string) {
		path, skip, err := fakecuda.Build(workDir)
		if err != nil {
			return "", "", "BUILD FAILED: " + err.Error()
		}
		return path, skip, ""
	})
}

// needShared builds libmemreplay.so with go build -buildmode=c-shared.
func needShared(t testing.TB) string {
	return sharedLib.need(t, func() (string, string, string) {
		if !cgoEnabled {
			return "", "built without cgo: -buildmode=c-shared needs it", ""
		}
		if _, ok := compiler(false); !ok {
			return "", "no C compiler: -buildmode=c-shared needs one", ""
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		path := filepath.Join(workDir, "libmemreplay.so")
		cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", path, ".")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Sprintf("BUILD FAILED: go build -buildmode=c-shared: %v\n%s", err, b)
		}
		return path, "", ""
	})
}

func needHarness(t testing.TB) string {
	return harness.need(t, func() (string, string, string) {
		return compile(false, "harness", "testdata/harness.c", "-ldl", "-lpthread")
	})
}

func needHarnessCxx(t testing.TB) string {
	return harnessCxx.need(t, func() (string, string, string) {
		return compile(true, "harness_cxx", "testdata/harness_cxx.cc", "-ldl")
	})
}

// needPyHost builds the C++ host as a library and the C program that
// loads it locally, as CPython loads torch (testdata/harness_pyhost.c):
// the command line that runs it, to which LIB and SIZE are appended.
func needPyHost(t testing.TB) []string {
	so := harnessCxxLib.need(t, func() (string, string, string) {
		return compile(true, "harness_cxx.so", "-shared", "-fPIC", "-DHARNESS_AS_LIBRARY", "testdata/harness_cxx.cc", "-ldl")
	})
	host := harnessPyHost.need(t, func() (string, string, string) {
		return compile(false, "harness_pyhost", "testdata/harness_pyhost.c", "-ldl")
	})
	return []string{host, so}
}

// run is one harness process: its output lines and its stderr.
type run struct {
	t      testing.TB
	lines  []string
	stderr string
}

// harnessEnv is the environment of a harness process: the fake driver
// with capacity bytes, and the extra variables (KEY=VALUE). Variables of
// the test's own environment that would change the library's behaviour are
// left out.
func harnessEnv(t testing.TB, capacity uint64, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MEMREPLAY_") || strings.HasPrefix(kv, "PYTORCH_") || strings.HasPrefix(kv, "FAKECUDA_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "MEMREPLAY_LIBCUDA="+needFake(t), fmt.Sprintf("FAKECUDA_CAPACITY=%d", capacity))
	return append(env, extra...)
}

// runHarness runs the C harness on script (one command per line).
func runHarness(t testing.TB, env []string, script string) *run {
	t.Helper()
	lib, h := needShared(t), needHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h, lib)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(strings.TrimSpace(script) + "\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, err, "harness failed\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	return &run{t: t, lines: strings.Split(strings.TrimRight(out.String(), "\n"), "\n"), stderr: errb.String()}
}

// get returns the rest of the n-th (0-based) output line that starts with
// prefix and a space.
func (r *run) nth(prefix string, n int) string {
	r.t.Helper()
	for _, l := range r.lines {
		if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
			if n == 0 {
				return rest
			}
			n--
		}
	}
	r.t.Fatalf("no line %q (#%d) in the harness output:\n%s\nstderr:\n%s", prefix, n, strings.Join(r.lines, "\n"), r.stderr)
	return ""
}

func (r *run) get(prefix string) string { r.t.Helper(); return r.nth(prefix, 0) }

// openFake opens the fake driver in this process (the in-process tests).
func openFake(t testing.TB) func() (*cuda.Driver, error) {
	path := needFake(t)
	return func() (*cuda.Driver, error) { return cuda.Open(cuda.WithLibrary(path)) }
}

package realgpu_test

// The fake CUDA driver of allocator/cuda (testdata/fakecuda.c), built once
// per test binary and loaded through the same dlopen path a real driver
// takes (internal/fakecuda). Its state is process-global: no test here runs
// in parallel with another.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/internal/fakecuda"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/sim/replay/realgpu"
	"github.com/memreplay/memreplay/trace"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

var (
	fakeLib, fakeSkip string
	fakeErr           error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "realgpu-fake")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fakeLib, fakeSkip, fakeErr = fakecuda.Build(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needFake resets the fake to an empty GPU of capacity bytes (2 MiB
// granularity, no context overhead) and returns its controls; it skips
// where the fake cannot be built (no C compiler, no cgo) and fails where
// the compiler fails on it.
func needFake(t *testing.T, capacity uint64) *fakecuda.Controls {
	t.Helper()
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	if fakeLib == "" {
		t.Skip(fakeSkip)
	}
	ctl, err := fakecuda.Open(fakeLib)
	require.NoError(t, err)
	require.NoError(t, ctl.Reset(capacity, 0, 0))
	return ctl
}

// open opens the fake GPU; the backend is closed at the end of the test
// (tests that check what Close does close it themselves first).
func open(t *testing.T, o realgpu.Options) *realgpu.Backend {
	t.Helper()
	o.Library = fakeLib
	b, err := realgpu.Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// realTraces lists the real PyTorch traces: the project's traces/pytorch,
// and ../shared/traces/pytorch beside the checkout when present (the same
// file in both counts once).
func realTraces(t *testing.T) (paths []string, sharedMissing bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, dir := range []string{"../../../traces/pytorch", "../../../../shared/traces/pytorch"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.pickle"))
		require.NoError(t, err)
		if len(files) == 0 && dir != "../../../traces/pytorch" {
			sharedMissing = true
		}
		sort.Strings(files)
		for _, f := range files {
			if !seen[filepath.Base(f)] {
				seen[filepath.Base(f)] = true
				paths = append(paths, f)
			}
		}
	}
	require.NotEmpty(t, paths, "traces/pytorch holds real traces")
	return paths, sharedMissing
}

// recordWorkload is replaytest.RecordWorkload with two side streams (9
// and 10), completed apart.
func recordWorkload(t *testing.T, conf string, capacity uint64, seed uint64, steps int) (*trace.Trace, config.Config, allocator.Stats) {
	return replaytest.RecordWorkload(t, conf, capacity, seed, steps, 9, 10)
}

// sameCalls requires the call counts (calls and failures per kind) of a
// replay on the GPU to be the simulator's.
func sameCalls(t *testing.T, want, got gpu.Counters) {
	t.Helper()
	for _, c := range gpu.Calls() {
		w, g := want.Get(c), got.Get(c)
		require.Equal(t, w.Calls, g.Calls, "%s calls", c)
		require.Equal(t, w.Failures, g.Failures, "%s failures", c)
	}
	require.Equal(t, want.Total.Calls, got.Total.Calls)
}

// idleGPU is a GPU with no kernels running: every event the driver records
// is complete at once, as on real hardware, where the fake would otherwise
// wait for a synchronisation.
type idleGPU struct {
	replay.Process
	ctl *fakecuda.Controls
}

func (g idleGPU) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	e, err := g.Process.RecordEvent(s)
	if err == nil {
		err = g.ctl.CompleteAll()
	}
	return e, err
}

// onIdleGPU wraps b's processes as idleGPU.
func onIdleGPU(b *realgpu.Backend, ctl *fakecuda.Controls) replay.NewProcessFunc {
	return func(device int32, capacity uint64, source string) (replay.Process, error) {
		p, err := b.NewProcess(device, capacity, source)
		if err != nil {
			return nil, err
		}
		return idleGPU{p, ctl}, nil
	}
}

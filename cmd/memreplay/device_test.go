package main

// replay and compare --device cuda, on allocator/cuda's fake driver
// (built here with the C compiler, internal/fakecuda) standing in for
// libcuda.so.1 through MEMREPLAY_LIBCUDA. The fake's state is
// process-global per library file; each test builds its own copy and none
// runs in parallel.

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/internal/fakecuda"
)

// fakeDriver builds the fake driver, points MEMREPLAY_LIBCUDA at it and
// resets it to an empty GPU of capacity bytes; it skips without a C
// compiler or cgo.
func fakeDriver(t *testing.T, capacity uint64) *fakecuda.Controls {
	t.Helper()
	path, skip, err := fakecuda.Build(t.TempDir())
	require.NoError(t, err)
	if path == "" {
		t.Skip(skip)
	}
	t.Setenv("MEMREPLAY_LIBCUDA", path)
	ctl, err := fakecuda.Open(path)
	require.NoError(t, err)
	require.NoError(t, ctl.Reset(capacity, 0, 0))
	return ctl
}

func TestReplayOnTheGPU(t *testing.T) {
	ctl := fakeDriver(t, 16<<30)

	code, stdout, stderr := runCLI("replay", "--device", "cuda", "--check", "--format", "json", completeTrace)
	require.Equal(t, 0, code, stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	check := out["check"].(map[string]any)
	require.EqualValues(t, 45, check["decisions_expected"])
	require.EqualValues(t, 45, check["decisions_matched"])
	require.Equal(t, true, check["final_segments_match"])
	require.EqualValues(t, 9, out["stats"].(map[string]any)["num_device_alloc"])
	calls := out["device_calls"].(map[string]any)
	require.Equal(t, "measured", calls["time_source"])
	require.Positive(t, calls["measured_time_ns"])
	require.EqualValues(t, 0, calls["modelled_time_ns"])
	require.EqualValues(t, 9, calls["cuda_malloc"])
	dev := out["devices"].([]any)[0].(map[string]any)
	require.Equal(t, "memreplay fake GPU, cuda:0", dev["name"])
	require.Equal(t, "measured", dev["time_source"])
	require.Equal(t, "device memory", dev["capacity_source"])
	require.EqualValues(t, 16<<30, dev["capacity"])
	require.EqualValues(t, 9, dev["calls"].(map[string]any)["cudaMalloc"].(map[string]any)["calls"])
	require.EqualValues(t, ctl.Count("cuMemAlloc_v2"), 9, "each a driver call")
	require.Zero(t, ctl.Stat("used"), "the replay freed everything")
	require.Zero(t, ctl.Stat("live"))

	// The table says where it ran and that the time is measured.
	code, stdout, stderr = runCLI("replay", "--device", "cuda:0", "--capacity", "8GiB", partialTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "memreplay fake GPU, cuda:0")
	require.Contains(t, stdout, "measured device time")
	require.NotContains(t, stdout, "modelled device time")
	require.Contains(t, stdout, "8.00 GiB (option)")
	require.Zero(t, ctl.Stat("used"))

	// The simulated GPU stays the default, and says its time is modelled.
	code, stdout, _ = runCLI("replay", "--device", "sim", completeTrace)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "modelled device time")
	require.NotContains(t, stdout, "fake GPU")

	code, stdout, stderr = runCLI("compare", "--device", "cuda", completeTrace, "--alloc-conf", "expandable_segments:True")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "measured device time")
	require.Zero(t, ctl.Stat("used"))
	require.Zero(t, ctl.Stat("live"))

	// --record notes the device.
	rec := filepath.Join(t.TempDir(), "r.mrt")
	code, _, stderr = runCLI("replay", "--device", "cuda", "--record", rec, completeTrace)
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = runCLI("inspect", rec)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "--device cuda")
}

func TestReplayOnTheGPUErrors(t *testing.T) {
	// No driver: one line, exit 2, saying what to set.
	t.Setenv("MEMREPLAY_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	code, stdout, stderr := runCLI("replay", "--device", "cuda", completeTrace)
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, stderr)
	require.Contains(t, stderr, "memreplay replay: --device cuda: cuda:")
	if !strings.Contains(stderr, "without cgo") {
		require.Contains(t, stderr, "cannot load the CUDA driver")
		require.Contains(t, stderr, "MEMREPLAY_LIBCUDA")
	}

	code, _, stderr = runCLI("replay", "--device", "gpu0", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--device "gpu0": want sim, cuda or cuda:N`)
	code, _, stderr = runCLI("compare", "--device", "cuda:x", completeTrace, "--alloc-conf", "")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "cuda:N")

	ctl := fakeDriver(t, 4<<30)
	// A driver without a GPU.
	t.Setenv("FAKECUDA_DEVICES", "0")
	code, _, stderr = runCLI("replay", "--device", "cuda", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "CUDA_ERROR_NO_DEVICE")
	t.Setenv("FAKECUDA_DEVICES", "1")
	code, _, stderr = runCLI("replay", "--device", "cuda:1", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "ordinal 1, the driver sees 1 GPU(s)")
	// More than the GPU has.
	code, _, stderr = runCLI("replay", "--device", "cuda", "--capacity", "5GiB", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--capacity: realgpu: capacity larger than the GPU")

	// A sticky driver error during the replay: exit 2 naming the event and
	// the CUDA error, and nothing left on the GPU; during the restore of a
	// partial trace's initial state, naming the segment (not the trace as
	// bad input).
	require.NoError(t, ctl.Sticky(700, 4))
	code, _, stderr = runCLI("replay", "--device", "cuda", completeTrace)
	require.Equal(t, 2, code)
	require.Regexp(t, `^memreplay replay: replay: event \d+: cuMemAlloc_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS \(700\)`, stderr)
	require.Zero(t, ctl.Stat("used"))
	require.NoError(t, ctl.Sticky(700, 6))
	code, _, stderr = runCLI("replay", "--device", "cuda", partialTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "memreplay replay: replay: device 0: restoring the initial segment at 0x")
	require.Contains(t, stderr, "CUDA_ERROR_ILLEGAL_ADDRESS")
	require.Zero(t, ctl.Stat("used"))
}

package gpu_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

func TestFailMallocNth(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	p.FailMalloc(3)
	var results []bool
	for range 5 {
		_, err := p.Malloc(2 * miB)
		if err != nil {
			requireOOM(t, err, "cudaMalloc", "cudaErrorMemoryAllocation")
		}
		results = append(results, err == nil)
	}
	assert.Equal(t, []bool{true, true, false, true, true}, results, "only the third call fails, once")
	assert.Equal(t, 4*2*miB, p.Used(), "the failed call held nothing")
	c := p.Counters().Get(gpu.CallMalloc)
	assert.Equal(t, uint64(5), c.Calls)
	assert.Equal(t, uint64(1), c.Failures)

	// n = 1 is the next call; other kinds of call do not count.
	p.FailMalloc(1)
	_, err := p.CreatePage(2 * miB)
	require.NoError(t, err)
	_, _, err = p.MemGetInfo()
	require.NoError(t, err)
	_, err = p.Malloc(2 * miB)
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	_, err = p.Malloc(2 * miB)
	require.NoError(t, err)

	// Faults are per process.
	q := newProcess(t, g)
	p.FailMalloc(1)
	_, err = q.Malloc(2 * miB)
	require.NoError(t, err)
	_, err = p.Malloc(2 * miB)
	assert.Error(t, err)
}

func TestFailCreatePageNth(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	p.FailCreatePage(2)
	p.FailCreatePage(4)
	var results []bool
	for range 5 {
		_, err := p.CreatePage(20 * miB)
		if err != nil {
			requireOOM(t, err, "cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY")
		}
		results = append(results, err == nil)
	}
	assert.Equal(t, []bool{true, false, true, false, true}, results)
	assert.Equal(t, 3*20*miB, p.Used())
	// Malloc is unaffected.
	p.FailCreatePage(1)
	_, err := p.Malloc(2 * miB)
	require.NoError(t, err)
	_, err = p.CreatePage(2 * miB)
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
}

func TestFaultsOnTheSameCallFailItOnce(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	p.FailMalloc(1)
	p.FailMalloc(1)
	_, err := p.Malloc(2 * miB)
	assert.Error(t, err)
	_, err = p.Malloc(2 * miB)
	assert.NoError(t, err)
}

func TestClearFaults(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	p.FailMalloc(1)
	p.ClearFaults()
	_, err := p.Malloc(2 * miB)
	assert.NoError(t, err)
}

func TestFailWith(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	base, err := p.ReserveAddress(40 * miB)
	require.NoError(t, err)
	h, err := p.CreatePage(20 * miB)
	require.NoError(t, err)

	// A given error is returned as is, and the call has no effect.
	boom := errors.New("boom")
	require.NoError(t, p.FailWith(gpu.CallMap, 1, boom))
	assert.Same(t, boom, p.Map(base, h))
	require.NoError(t, p.Map(base, h), "the failed Map mapped nothing")

	// nil means a generic device error for calls that do not allocate...
	require.NoError(t, p.FailWith(gpu.CallUnmap, 2, nil))
	require.NoError(t, p.SetAccess(base, 20*miB))
	require.NoError(t, p.Unmap(base, 20*miB))
	require.NoError(t, p.Map(base, h))
	err = p.Unmap(base, 20*miB)
	requireDeviceError(t, err, "cuMemUnmap", "CUDA_ERROR_UNKNOWN")

	// ...and out of memory for those that do.
	require.NoError(t, p.FailWith("cuMemAddressReserve", 1, nil))
	_, err = p.ReserveAddress(2 * miB)
	requireOOM(t, err, "cuMemAddressReserve", "CUDA_ERROR_OUT_OF_MEMORY")

	// Bad arguments are reported, not ignored.
	assert.Error(t, p.FailWith(gpu.CallMalloc, 0, nil))
	assert.Error(t, p.FailWith("cudaLaunchKernel", 1, nil))
	assert.Error(t, p.FailWith(gpu.CallDeviceSync, 1, nil))
	assert.Panics(t, func() { p.FailMalloc(0) })
}

func TestFailWithFatalErrorCorruptsContext(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	fatal := &allocator.DeviceError{Call: "cudaMalloc", Code: 700, Name: "cudaErrorIllegalAddress", Sticky: true}
	require.NoError(t, p.FailWith(gpu.CallMalloc, 2, fatal))
	_, err := p.Malloc(2 * miB)
	require.NoError(t, err)
	_, err = p.Malloc(2 * miB)
	assert.Same(t, fatal, err)

	// From then on every call fails with it, under its own name.
	err = p.SynchronizeStream(0)
	assert.ErrorIs(t, err, allocator.ErrFatal)
	var de *allocator.DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "cudaStreamSynchronize", de.Call)
	assert.Equal(t, "cudaErrorIllegalAddress", de.Name)
	assert.Same(t, fatal, p.Sticky())
}

// TestStickyErrorIsFatalAndPerProcess is the seeds' failure: a device-side
// assert in one trial poisons that process for good, and only that process.
func TestStickyErrorIsFatalAndPerProcess(t *testing.T) {
	g := newGPU(t, giB)
	p, q := newProcess(t, g), newProcess(t, g)
	seg, err := p.Malloc(10 * miB)
	require.NoError(t, err)
	e := record(t, p, 1)
	require.Nil(t, p.Sticky())

	p.InjectStickyError("cudaErrorAssert")
	require.ErrorIs(t, p.Sticky(), allocator.ErrFatal)

	calls := map[string]func() error{
		"cudaMalloc":            func() error { _, err := p.Malloc(2 * miB); return err },
		"cudaFree":              func() error { return p.Free(seg) },
		"cudaMemGetInfo":        func() error { _, _, err := p.MemGetInfo(); return err },
		"cudaEventRecord":       func() error { _, err := p.RecordEvent(0); return err },
		"cudaEventQuery":        func() error { _, err := p.QueryEvent(e); return err },
		"cudaEventSynchronize":  func() error { return p.SynchronizeEvent(e) },
		"cudaStreamSynchronize": func() error { return p.SynchronizeStream(0) },
		"cuMemAddressReserve":   func() error { _, err := p.ReserveAddress(2 * miB); return err },
		"cuMemAddressFree":      func() error { return p.FreeAddress(0, 2*miB) },
		"cuMemCreate":           func() error { _, err := p.CreatePage(2 * miB); return err },
		"cuMemMap":              func() error { return p.Map(0, 1) },
		"cuMemSetAccess":        func() error { return p.SetAccess(0, 2*miB) },
		"cuMemUnmap":            func() error { return p.Unmap(0, 2*miB) },
		"cuMemRelease":          func() error { return p.Release(1) },
	}
	for call, f := range calls {
		t.Run(call, func(t *testing.T) {
			for range 2 { // and it stays
				err := f()
				require.ErrorIs(t, err, allocator.ErrFatal)
				assert.NotErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
				var de *allocator.DeviceError
				require.ErrorAs(t, err, &de)
				assert.True(t, de.Sticky)
				assert.Equal(t, call, de.Call)
				assert.Equal(t, 710, de.Code)
				if call[:4] == "cuda" {
					assert.Equal(t, "cudaErrorAssert", de.Name)
				} else {
					assert.Equal(t, "CUDA_ERROR_ASSERT", de.Name)
				}
			}
		})
	}
	assert.Equal(t, 10*miB, p.Used(), "a corrupted context frees nothing")

	// The other process on the GPU carries on.
	_, err = q.Malloc(2 * miB)
	require.NoError(t, err)
	_, _, err = q.MemGetInfo()
	require.NoError(t, err)

	// Exit recovers the memory; a fresh process is healthy.
	require.NoError(t, p.Close())
	assert.Equal(t, 2*miB, g.Used())
	r := newProcess(t, g)
	_, err = r.Malloc(2 * miB)
	require.NoError(t, err)
}

func TestStickyErrorNames(t *testing.T) {
	g := newGPU(t, giB)
	for _, c := range []struct {
		name, runtime, driver string
		code                  int
	}{
		{"", "cudaErrorAssert", "CUDA_ERROR_ASSERT", 710},
		{"cudaErrorIllegalAddress", "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", 700},
		{"CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", 700},
		{"cudaErrorLaunchFailure", "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", 719},
		{"somethingElse", "somethingElse", "somethingElse", 999},
	} {
		p := newProcess(t, g)
		p.InjectStickyError(c.name)
		var de *allocator.DeviceError
		_, err := p.Malloc(2 * miB)
		require.ErrorAs(t, err, &de)
		assert.Equal(t, c.runtime, de.Name)
		assert.Equal(t, c.code, de.Code)
		assert.ErrorIs(t, err, allocator.ErrFatal)
		_, err = p.CreatePage(2 * miB)
		require.ErrorAs(t, err, &de)
		assert.Equal(t, c.driver, de.Name)
		require.NoError(t, p.Close())
	}
}

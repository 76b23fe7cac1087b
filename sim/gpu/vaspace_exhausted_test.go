package gpu_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// A process's address window is far larger than the device's memory, as on
// a real GPU: by default 2^49 bytes, and 512 times the memory for a device
// of more than 1 TiB.
func TestAddressWindowFarLargerThanMemory(t *testing.T) {
	a := newProcess(t, newGPU(t, 80*giB))
	for _, c := range []struct{ capacity, window uint64 }{
		{80 * giB, 512 << 40},
		{1 << 40, 512 << 40},
		{4 << 40, 2048 << 40},
		{3 << 40, 2048 << 40},
	} {
		g := newGPU(t, c.capacity)
		p, q := newProcess(t, g), newProcess(t, g)
		assert.Equal(t, c.window, q.AddressBase()-p.AddressBase(), "capacity %d", c.capacity)
	}
	// Expandable reservations of 1.125 x the memory: hundreds fit.
	const reserve = 90 * giB
	for i := range 400 {
		_, err := a.ReserveAddress(reserve)
		require.NoError(t, err, "reservation %d", i)
	}
}

// requireNoAddressSpace: the driver's name for it, but not out of memory.
func requireNoAddressSpace(t *testing.T, err error) {
	t.Helper()
	requireDeviceErrorName(t, err, "cuMemAddressReserve", "CUDA_ERROR_OUT_OF_MEMORY")
	require.ErrorIs(t, err, allocator.ErrAddressSpaceExhausted)
	assert.False(t, errors.Is(err, allocator.ErrDeviceOutOfMemory))
}

func requireDeviceErrorName(t *testing.T, err error, call, name string) {
	t.Helper()
	var de *allocator.DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, call, de.Call)
	assert.Equal(t, name, de.Name)
}

// Running out of address space is its own condition, named, and not out of
// memory: for an expandable reservation and for a cudaMalloc segment.
func TestAddressSpaceExhausted(t *testing.T) {
	g := newGPU(t, giB, func(o *gpu.Options) { o.AddressSpace = 64 * miB })
	p := newProcess(t, g)
	_, err := p.ReserveAddress(48 * miB)
	require.NoError(t, err)
	for _, call := range []func() error{
		func() error { _, err := p.ReserveAddress(32 * miB); return err },
		func() error { _, err := p.ReserveAddress(128 * miB); return err },
		func() error { _, err := p.Malloc(20 * miB); return err },
	} {
		err := call()
		require.ErrorIs(t, err, allocator.ErrAddressSpaceExhausted)
		assert.False(t, errors.Is(err, allocator.ErrDeviceOutOfMemory), "not out of memory: %v", err)
		assert.Contains(t, err.Error(), "virtual address space exhausted")
		assert.Contains(t, err.Error(), "window of 67108864 bytes (50331648 reserved)")
	}
	assert.Zero(t, g.Used())
}

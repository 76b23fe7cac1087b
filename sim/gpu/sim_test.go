package gpu_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

const (
	kiB = uint64(1) << 10
	miB = uint64(1) << 20
	giB = uint64(1) << 30
)

// newGPU returns a GPU with no context overhead, so tests reason in round
// numbers, after applying edit to the options.
func newGPU(t *testing.T, capacity uint64, edit ...func(*gpu.Options)) *gpu.GPU {
	t.Helper()
	opts := gpu.Options{Capacity: capacity, NoContextOverhead: true}
	for _, e := range edit {
		e(&opts)
	}
	g, err := gpu.New(opts)
	require.NoError(t, err)
	return g
}

func newProcess(t *testing.T, g *gpu.GPU) *gpu.Process {
	t.Helper()
	p, err := g.NewProcess()
	require.NoError(t, err)
	return p
}

// requireDeviceError checks err is a non-sticky, non-OOM DeviceError of the
// given call and name: misuse must not look like a reason to retry or quit.
func requireDeviceError(t *testing.T, err error, call, name string) {
	t.Helper()
	var de *allocator.DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, call, de.Call)
	assert.Equal(t, name, de.Name)
	assert.False(t, de.Sticky, "misuse must not be sticky")
	assert.False(t, errors.Is(err, allocator.ErrFatal))
	assert.False(t, errors.Is(err, allocator.ErrDeviceOutOfMemory))
}

func requireOOM(t *testing.T, err error, call, name string) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	assert.NotErrorIs(t, err, allocator.ErrFatal)
	var de *allocator.DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, call, de.Call)
	assert.Equal(t, name, de.Name)
	assert.Equal(t, 2, de.Code)
}

func TestNewGPUDefaults(t *testing.T) {
	g, err := gpu.New(gpu.Options{Capacity: 24 * giB})
	require.NoError(t, err)
	assert.Equal(t, 24*giB, g.Capacity())
	assert.Equal(t, gpu.DefaultGranularity, g.Granularity())
	assert.Equal(t, uint64(2*miB), g.Granularity())
	assert.Equal(t, gpu.DefaultContextOverhead, g.ContextOverhead())
	assert.Equal(t, gpu.DefaultCosts(), g.Costs())
	assert.NotEmpty(t, g.Name())

	p := newProcess(t, g)
	assert.Equal(t, gpu.DefaultAddressBase, p.AddressBase())
	addr, err := p.Malloc(20 * miB)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x7f0000000000), addr)
}

func TestNewGPUInvalidOptions(t *testing.T) {
	for name, opts := range map[string]gpu.Options{
		"no capacity":              {},
		"granularity not pow2":     {Capacity: giB, Granularity: 3 * miB},
		"both context options":     {Capacity: giB, ContextOverhead: miB, NoContextOverhead: true},
		"negative cost":            {Capacity: giB, Costs: gpu.CostModel{Malloc: -1}},
		"base not aligned":         {Capacity: giB, AddressBase: 0x7f0000001000},
		"base below granularity":   {Capacity: giB, Granularity: 64 * miB, AddressBase: 0x7f0002000000},
		"address space unaligned":  {Capacity: giB, AddressSpace: 3 * kiB},
		"capacity absurdly large":  {Capacity: 1 << 60},
		"address base beyond 2^62": {Capacity: giB, AddressBase: 1 << 63},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := gpu.New(opts)
			assert.Error(t, err)
		})
	}
}

func TestCapacitySharedAcrossProcesses(t *testing.T) {
	g := newGPU(t, 100*miB)
	a, b := newProcess(t, g), newProcess(t, g)

	segA, err := a.Malloc(60 * miB)
	require.NoError(t, err)
	assert.Equal(t, 60*miB, g.Used())
	assert.Equal(t, 40*miB, g.Free())

	// b sees a's segment in both the free count and a failed allocation.
	free, total, err := b.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, 40*miB, free)
	assert.Equal(t, 100*miB, total)
	_, err = b.Malloc(60 * miB)
	requireOOM(t, err, "cudaMalloc", "cudaErrorMemoryAllocation")
	assert.Equal(t, uint64(0), b.Used(), "a failed cudaMalloc holds nothing")

	// Closing a frees its segment for b, as process exit does.
	require.NoError(t, a.Close())
	assert.Equal(t, uint64(0), g.Used())
	segB, err := b.Malloc(60 * miB)
	require.NoError(t, err)
	assert.NotEqual(t, segA, segB, "processes have separate address windows")
	assert.Equal(t, 60*miB, b.Used())
	assert.Equal(t, []*gpu.Process{b}, g.Processes())

	// Freeing gives the memory back too.
	require.NoError(t, b.Free(segB))
	assert.Equal(t, 100*miB, g.Free())
}

func TestContextOverheadCharged(t *testing.T) {
	g, err := gpu.New(gpu.Options{Capacity: 2*giB + 100*miB, ContextOverhead: giB})
	require.NoError(t, err)
	a := newProcess(t, g)
	assert.Equal(t, giB, a.Used())
	assert.Equal(t, giB, g.Used())
	free, _, err := a.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, giB+100*miB, free)

	b := newProcess(t, g)
	assert.Equal(t, 2*giB, g.Used())

	// A third context does not fit.
	_, err = g.NewProcess()
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	assert.Len(t, g.Processes(), 2)

	// Segments and contexts compete for the same bytes.
	_, err = a.Malloc(100 * miB)
	require.NoError(t, err)
	assert.Equal(t, giB+100*miB, a.Used())
	_, err = b.Malloc(2 * miB)
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)

	require.NoError(t, a.Close())
	assert.Equal(t, uint64(0), a.Used())
	assert.Equal(t, giB, g.Used())
	_, err = g.NewProcess()
	require.NoError(t, err)

	// The default is a realistic, non-zero figure.
	d, err := gpu.New(gpu.Options{Capacity: 24 * giB})
	require.NoError(t, err)
	p := newProcess(t, d)
	assert.Equal(t, 500*miB, p.Used())
}

func TestMallocRoundsPhysicalUseToGranularity(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	for _, c := range []struct{ size, used uint64 }{
		{1, 2 * miB},
		{512, 2 * miB},
		{2 * miB, 2 * miB},
		{2*miB + 1, 4 * miB},
		{20 * miB, 20 * miB},
	} {
		before := p.Used()
		_, err := p.Malloc(c.size)
		require.NoError(t, err)
		assert.Equal(t, c.used, p.Used()-before, "size %d", c.size)
	}

	// A coarser granularity rounds further.
	g2 := newGPU(t, giB, func(o *gpu.Options) { o.Granularity = 32 * miB })
	p2 := newProcess(t, g2)
	_, err := p2.Malloc(20 * miB)
	require.NoError(t, err)
	assert.Equal(t, 32*miB, p2.Used())
}

func TestMallocAddressesDeterministicAndReused(t *testing.T) {
	run := func() []uint64 {
		g := newGPU(t, 4*giB, func(o *gpu.Options) { o.AddressBase = 0x100000000 })
		p := newProcess(t, g)
		var got []uint64
		m := func(size uint64) uint64 {
			addr, err := p.Malloc(size)
			require.NoError(t, err)
			got = append(got, addr)
			return addr
		}
		a := m(20 * miB)
		m(2 * miB)
		m(1000) // small: 512-aligned, packed after the 2 MiB segment
		m(512)
		m(3*miB + 1) // large: 2 MiB-aligned, takes 4 MiB of addresses
		require.NoError(t, p.Free(a))
		m(10 * miB) // reuses the lowest free range: a's
		m(10 * miB) // and the rest of it
		m(1 * miB)  // lowest fitting gap: the one left before the 3 MiB segment's aligned start
		return got
	}
	first := run()
	assert.Equal(t, []uint64{
		0x100000000,
		0x100000000 + 20*miB,
		0x100000000 + 22*miB,
		0x100000000 + 22*miB + 1024,
		0x100000000 + 24*miB,
		0x100000000,
		0x100000000 + 10*miB,
		0x100000000 + 22*miB + 1536,
	}, first)
	assert.Equal(t, first, run(), "same calls, same addresses")
}

func TestProcessAddressWindows(t *testing.T) {
	g := newGPU(t, giB)
	a, b := newProcess(t, g), newProcess(t, g)
	assert.Equal(t, gpu.DefaultAddressBase, a.AddressBase())
	assert.Equal(t, gpu.DefaultAddressBase+gpu.DefaultAddressSpace, b.AddressBase())

	addrA, err := a.Malloc(2 * miB)
	require.NoError(t, err)
	// b cannot free a's segment: it is not b's.
	requireDeviceError(t, b.Free(addrA), "cudaFree", "cudaErrorInvalidValue")

	// A process started after a exited takes over a's window.
	require.NoError(t, a.Close())
	c := newProcess(t, g)
	assert.Equal(t, a.AddressBase(), c.AddressBase())
	assert.Equal(t, 2, c.ID())
	addrC, err := c.Malloc(2 * miB)
	require.NoError(t, err)
	assert.Equal(t, addrA, addrC)
}

func TestMallocAndFreeMisuse(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)

	_, err := p.Malloc(0)
	requireDeviceError(t, err, "cudaMalloc", "cudaErrorInvalidValue")

	requireDeviceError(t, p.Free(0x1234), "cudaFree", "cudaErrorInvalidValue")

	addr, err := p.Malloc(4 * miB)
	require.NoError(t, err)
	requireDeviceError(t, p.Free(addr+512), "cudaFree", "cudaErrorInvalidValue")
	require.NoError(t, p.Free(addr))
	requireDeviceError(t, p.Free(addr), "cudaFree", "cudaErrorInvalidValue")

	// More than the device has at all is out of memory, not a bad argument.
	_, err = p.Malloc(2 * giB)
	requireOOM(t, err, "cudaMalloc", "cudaErrorMemoryAllocation")
	_, err = p.Malloc(^uint64(0))
	requireOOM(t, err, "cudaMalloc", "cudaErrorMemoryAllocation")

	// None of it hurt the process.
	assert.Equal(t, uint64(0), p.Used())
	_, err = p.Malloc(giB)
	require.NoError(t, err)
}

func TestCloseReleasesEverything(t *testing.T) {
	g, err := gpu.New(gpu.Options{Capacity: giB, ContextOverhead: 100 * miB})
	require.NoError(t, err)
	p := newProcess(t, g)
	_, err = p.Malloc(10 * miB)
	require.NoError(t, err)
	va, err := p.ReserveAddress(40 * miB)
	require.NoError(t, err)
	h, err := p.CreatePage(20 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Map(va, h))
	_, err = p.CreatePage(2 * miB) // created, never mapped
	require.NoError(t, err)
	_, err = p.RecordEvent(1)
	require.NoError(t, err)
	assert.Equal(t, 100*miB+10*miB+20*miB+2*miB, g.Used())

	require.NoError(t, p.Close())
	assert.Equal(t, uint64(0), g.Used())
	assert.Equal(t, uint64(0), p.Used())
	assert.True(t, p.Closed())
	assert.Empty(t, g.Processes())

	// Every call now fails, and says why.
	_, err = p.Malloc(2 * miB)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	assert.ErrorIs(t, p.Free(va), gpu.ErrClosed)
	_, _, err = p.MemGetInfo()
	assert.ErrorIs(t, err, gpu.ErrClosed)
	_, err = p.ReserveAddress(2 * miB)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	_, err = p.CreatePage(2 * miB)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	assert.ErrorIs(t, p.Map(va, h), gpu.ErrClosed)
	assert.ErrorIs(t, p.SetAccess(va, 2*miB), gpu.ErrClosed)
	assert.ErrorIs(t, p.Unmap(va, 2*miB), gpu.ErrClosed)
	assert.ErrorIs(t, p.Release(h), gpu.ErrClosed)
	assert.ErrorIs(t, p.FreeAddress(va, 40*miB), gpu.ErrClosed)
	_, err = p.RecordEvent(0)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	_, err = p.QueryEvent(1)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	assert.ErrorIs(t, p.SynchronizeEvent(1), gpu.ErrClosed)
	assert.ErrorIs(t, p.SynchronizeStream(0), gpu.ErrClosed)
	assert.ErrorIs(t, p.Close(), gpu.ErrClosed)
	// The test controls stay harmless.
	p.CompleteAllEvents()
	p.CompleteEvents(1)
	assert.False(t, p.CompleteEvent(1))
	assert.Equal(t, 0, p.PendingEvents())
}

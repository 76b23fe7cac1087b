package gpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// TestVMMExpandableSegmentLifecycle walks the calls PyTorch's expandable
// segments make: reserve ~1.125x the device, create and map 20 MiB pages
// one by one, set access on the run, then unmap and release page by page.
func TestVMMExpandableSegmentLifecycle(t *testing.T) {
	const page = 20 * miB
	g := newGPU(t, giB)
	p := newProcess(t, g)
	var vm allocator.VirtualMemory = p
	assert.Equal(t, 2*miB, vm.Granularity())

	reserve := (giB + giB/8 + page - 1) / page * page
	base, err := vm.ReserveAddress(reserve)
	require.NoError(t, err)
	assert.Zero(t, base%(2*miB))
	assert.Equal(t, uint64(0), g.Used(), "a reservation holds no memory")

	var hs []allocator.PageHandle
	for i := range uint64(3) {
		h, err := vm.CreatePage(page)
		require.NoError(t, err)
		require.NoError(t, vm.Map(base+i*page, h))
		hs = append(hs, h)
	}
	assert.Equal(t, 3*page, g.Used())
	assert.Equal(t, 3*page, p.Used())
	require.NoError(t, vm.SetAccess(base, 3*page))
	require.NoError(t, vm.SetAccess(base+page, page))
	free, _, err := p.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, giB-3*page, free)

	// Handles are distinct and deterministic.
	assert.Equal(t, []allocator.PageHandle{1, 2, 3}, hs)

	// Shrink from the top, as unmap_block does, after syncing the stream.
	require.NoError(t, vm.SynchronizeStream(0))
	for i := 2; i >= 1; i-- {
		require.NoError(t, vm.Unmap(base+uint64(i)*page, page))
		require.NoError(t, vm.Release(hs[i]))
	}
	assert.Equal(t, page, g.Used())

	// Unmapped granules can be mapped again, by a fresh page.
	h, err := vm.CreatePage(page)
	require.NoError(t, err)
	require.NoError(t, vm.Map(base+page, h))
	require.NoError(t, vm.SetAccess(base, 2*page))

	// One Unmap may cover several whole mappings.
	require.NoError(t, vm.Unmap(base, 2*page))
	require.NoError(t, vm.Release(hs[0]))
	require.NoError(t, vm.Release(h))
	require.NoError(t, vm.FreeAddress(base, reserve))
	assert.Equal(t, uint64(0), g.Used())

	// The range is reusable: the next reservation of the same size gets it.
	again, err := vm.ReserveAddress(reserve)
	require.NoError(t, err)
	assert.Equal(t, base, again)
}

func TestVMMReservationsShareTheAddressAllocator(t *testing.T) {
	g := newGPU(t, giB, func(o *gpu.Options) { o.AddressBase = 0x200000000 })
	p := newProcess(t, g)
	seg, err := p.Malloc(1000)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x200000000), seg)
	va, err := p.ReserveAddress(4 * miB)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x200000000)+2*miB, va, "2 MiB-aligned, past the small segment")
	seg2, err := p.Malloc(4 * miB)
	require.NoError(t, err)
	assert.Equal(t, va+4*miB, seg2)
	// A cudaFree of a reservation is misuse, and so is cuMemAddressFree of
	// a segment.
	requireDeviceError(t, p.Free(va), "cudaFree", "cudaErrorInvalidValue")
	requireDeviceError(t, p.FreeAddress(seg2, 4*miB), "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE")

	// With a finer granularity, reservations are still 2 MiB-aligned, as the
	// driver's are, while pages and mappings follow the granularity.
	fine := newGPU(t, giB, func(o *gpu.Options) { o.Granularity = 64 * kiB; o.AddressBase = 0x200000000 })
	f := newProcess(t, fine)
	_, err = f.Malloc(1000)
	require.NoError(t, err)
	assert.Equal(t, 64*kiB, f.Used(), "physical use follows the granularity")
	fva, err := f.ReserveAddress(128 * kiB)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x200000000)+2*miB, fva)
	h, err := f.CreatePage(64 * kiB)
	require.NoError(t, err)
	require.NoError(t, f.Map(fva+64*kiB, h))
	require.NoError(t, f.SetAccess(fva+64*kiB, 64*kiB))
}

func TestVMMMisuse(t *testing.T) {
	const (
		g2   = 2 * miB
		page = 20 * miB
	)
	g := newGPU(t, giB)
	p := newProcess(t, g)

	// A reservation of 100 MiB with one 20 MiB page mapped at its start, two
	// created and unmapped, and another process's page and reservation.
	base, err := p.ReserveAddress(100 * miB)
	require.NoError(t, err)
	mapped, err := p.CreatePage(page)
	require.NoError(t, err)
	require.NoError(t, p.Map(base, mapped))
	spare, err := p.CreatePage(g2)
	require.NoError(t, err)
	big, err := p.CreatePage(page)
	require.NoError(t, err)
	other := newProcess(t, g)
	foreign, err := other.CreatePage(g2)
	require.NoError(t, err)
	otherVA, err := other.ReserveAddress(g2)
	require.NoError(t, err)
	used := g.Used()

	for _, c := range []struct {
		name string
		call string
		code string
		err  func() error
	}{
		{"reserve 0", "cuMemAddressReserve", "CUDA_ERROR_INVALID_VALUE", func() error { _, err := p.ReserveAddress(0); return err }},
		{"reserve unaligned size", "cuMemAddressReserve", "CUDA_ERROR_INVALID_VALUE", func() error { _, err := p.ReserveAddress(3 * miB); return err }},
		{"free unknown range", "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", func() error { return p.FreeAddress(base+page, g2) }},
		{"free wrong size", "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", func() error { return p.FreeAddress(base, 50*miB) }},
		{"free wrong size, nothing mapped", "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", func() error { return other.FreeAddress(otherVA, 2*g2) }},
		{"free with a page mapped", "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", func() error { return p.FreeAddress(base, 100*miB) }},
		{"free another process's range", "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", func() error { return p.FreeAddress(otherVA, g2) }},
		{"create 0", "cuMemCreate", "CUDA_ERROR_INVALID_VALUE", func() error { _, err := p.CreatePage(0); return err }},
		{"create unaligned size", "cuMemCreate", "CUDA_ERROR_INVALID_VALUE", func() error { _, err := p.CreatePage(miB); return err }},
		{"map unknown handle", "cuMemMap", "CUDA_ERROR_INVALID_HANDLE", func() error { return p.Map(base+page, 999) }},
		{"map unaligned", "cuMemMap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Map(base+page+4*kiB, spare) }},
		{"map over a mapped granule", "cuMemMap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Map(base+18*miB, spare) }},
		{"map outside any reservation", "cuMemMap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Map(base+100*miB, spare) }},
		{"map past the reservation's end", "cuMemMap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Map(base+90*miB, big) }},
		{"map in another process's range", "cuMemMap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Map(otherVA, spare) }},
		{"set access unmapped", "cuMemSetAccess", "CUDA_ERROR_INVALID_VALUE", func() error { return p.SetAccess(base+page, g2) }},
		{"set access partly mapped", "cuMemSetAccess", "CUDA_ERROR_INVALID_VALUE", func() error { return p.SetAccess(base, page+g2) }},
		{"set access empty", "cuMemSetAccess", "CUDA_ERROR_INVALID_VALUE", func() error { return p.SetAccess(base, 0) }},
		{"set access unaligned", "cuMemSetAccess", "CUDA_ERROR_INVALID_VALUE", func() error { return p.SetAccess(base+512, g2) }},
		{"unmap unmapped", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base+page, g2) }},
		{"unmap half a page", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base, 10*miB) }},
		{"unmap the back of a page", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base+g2, page-g2) }},
		{"unmap past the mapping", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base, page+g2) }},
		{"unmap unaligned size", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base, page+1) }},
		{"unmap wrapping around", "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Unmap(base, ^uint64(0)-g2+1) }},
		{"release unknown", "cuMemRelease", "CUDA_ERROR_INVALID_HANDLE", func() error { return p.Release(999) }},
		{"release mapped", "cuMemRelease", "CUDA_ERROR_INVALID_VALUE", func() error { return p.Release(mapped) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireDeviceError(t, c.err(), c.call, c.code)
			assert.Equal(t, used, g.Used(), "a rejected call changes nothing")
		})
	}

	// The state survived every rejected call intact.
	require.NoError(t, p.SetAccess(base, page))
	require.NoError(t, p.Map(base+page, spare))
	require.NoError(t, p.Unmap(base, page))
	require.NoError(t, p.Unmap(base+page, g2))
	require.NoError(t, p.Release(mapped))
	require.NoError(t, p.Release(spare))
	require.NoError(t, p.Release(big))
	requireDeviceError(t, p.Release(spare), "cuMemRelease", "CUDA_ERROR_INVALID_HANDLE")
	require.NoError(t, p.FreeAddress(base, 100*miB))
	requireDeviceError(t, p.FreeAddress(base, 100*miB), "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE")
	require.NoError(t, other.Release(foreign))
	require.NoError(t, other.FreeAddress(otherVA, g2))
	assert.Equal(t, uint64(0), g.Used())

	// Misuse shows in the failure counts.
	assert.Equal(t, uint64(6), p.Counters().Get(gpu.CallMap).Failures)
}

// TestVMMAlias: one page mapped at two addresses (what the stitch policy
// does) holds its memory once, and can be released only when unmapped at
// both.
func TestVMMAlias(t *testing.T) {
	const g2 = 2 * miB
	g := newGPU(t, giB)
	p := newProcess(t, g)
	a, err := p.ReserveAddress(4 * g2)
	require.NoError(t, err)
	b, err := p.ReserveAddress(2 * g2)
	require.NoError(t, err)
	h1, err := p.CreatePage(g2)
	require.NoError(t, err)
	h2, err := p.CreatePage(g2)
	require.NoError(t, err)
	used := g.Used()
	require.NoError(t, p.Map(a, h1))
	require.NoError(t, p.Map(a+3*g2, h2))
	// Behind b, in the other order, as one range.
	require.NoError(t, p.Map(b, h2))
	require.NoError(t, p.Map(b+g2, h1))
	require.NoError(t, p.SetAccess(b, 2*g2))
	assert.Equal(t, used, g.Used(), "an alias holds no memory of its own")
	// Mapping the same page over a mapped granule is still refused.
	requireDeviceError(t, p.Map(b, h1), "cuMemMap", "CUDA_ERROR_INVALID_VALUE")

	require.NoError(t, p.Unmap(b, 2*g2))
	requireDeviceError(t, p.Release(h1), "cuMemRelease", "CUDA_ERROR_INVALID_VALUE")
	require.NoError(t, p.SetAccess(a, g2), "the first mapping survives the alias's unmap")
	require.NoError(t, p.Unmap(a, g2))
	require.NoError(t, p.Release(h1))
	require.NoError(t, p.Unmap(a+3*g2, g2))
	require.NoError(t, p.Release(h2))
	require.NoError(t, p.FreeAddress(a, 4*g2))
	require.NoError(t, p.FreeAddress(b, 2*g2))
	assert.Equal(t, uint64(0), g.Used())
}

func TestVMMReserveBeyondAddressSpace(t *testing.T) {
	g := newGPU(t, giB, func(o *gpu.Options) { o.AddressSpace = 64 * miB })
	p := newProcess(t, g)
	_, err := p.ReserveAddress(128 * miB)
	requireNoAddressSpace(t, err)
	a, err := p.ReserveAddress(40 * miB)
	require.NoError(t, err)
	_, err = p.ReserveAddress(40 * miB)
	requireNoAddressSpace(t, err)
	require.NoError(t, p.FreeAddress(a, 40*miB))
	_, err = p.ReserveAddress(64 * miB)
	require.NoError(t, err, "freed address space coalesces back into one range")
}

func TestCreatePageOutOfMemory(t *testing.T) {
	const page = 20 * miB
	g := newGPU(t, 50*miB)
	p, q := newProcess(t, g), newProcess(t, g)
	h1, err := p.CreatePage(page)
	require.NoError(t, err)
	_, err = q.CreatePage(page)
	require.NoError(t, err)

	// 10 MiB left: neither process gets another page.
	_, err = p.CreatePage(page)
	requireOOM(t, err, "cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY")
	_, err = q.CreatePage(page)
	requireOOM(t, err, "cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY")
	assert.Equal(t, 40*miB, g.Used())
	// But a smaller page still fits, and cudaMalloc competes for the same bytes.
	_, err = p.CreatePage(8 * miB)
	require.NoError(t, err)
	_, err = q.Malloc(4 * miB)
	requireOOM(t, err, "cudaMalloc", "cudaErrorMemoryAllocation")

	require.NoError(t, p.Release(h1))
	_, err = q.CreatePage(page)
	require.NoError(t, err)
}

// RefusePages answers for a run of CreatePage calls that cannot all
// succeed: the calls that fit, the failing one and the releases are
// counted as made; a run that fits, or one faults could change, is left to
// the calls.
func TestRefusePages(t *testing.T) {
	const page = 20 * miB
	g := newGPU(t, 100*miB)
	p := newProcess(t, g)
	require.NoError(t, p.RefusePages(page, 5))
	require.Zero(t, p.Counters().Get(gpu.CallCreatePage).Calls, "a run that fits makes no call here")

	err := p.RefusePages(page, 6)
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	create, release := p.Counters().Get(gpu.CallCreatePage), p.Counters().Get(gpu.CallRelease)
	assert.EqualValues(t, 6, create.Calls)
	assert.EqualValues(t, 1, create.Failures)
	assert.EqualValues(t, 5, release.Calls)
	assert.Equal(t, 6*gpu.DefaultCosts().Of(gpu.CallCreatePage)+5*gpu.DefaultCosts().Of(gpu.CallRelease), create.Time+release.Time)
	assert.Zero(t, g.Used())

	p.FailCreatePage(3)
	require.NoError(t, p.RefusePages(page, 6), "armed faults: the calls one by one decide")
}

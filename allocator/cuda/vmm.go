package cuda

import (
	"fmt"

	"github.com/memreplay/memreplay/allocator"
)

// The virtual memory management calls of expandable segments, with the
// arguments PyTorch's ExpandableSegment passes: pinned device memory on
// this ordinal with no exportable handle (cuMemCreate), read-write access
// for this device (cuMemSetAccess), reservations with the driver's default
// alignment (cuMemAddressReserve with alignment 0 and no fixed address).

// Granularity is cuMemGetAllocationGranularity (minimum granularity) for
// the device's memory, read once by Driver.Device; 0 when the device does
// not support VMM.
func (g *Device) Granularity() uint64 { return g.gran }

// ReserveAddress is cuMemAddressReserve.
func (g *Device) ReserveAddress(size uint64) (uint64, error) {
	a, _, err := g.call(opReserve, size, 0, 0)
	return a, err
}

// FreeAddress is cuMemAddressFree.
func (g *Device) FreeAddress(addr, size uint64) error {
	_, _, err := g.call(opAddressFree, addr, size, 0)
	return err
}

// CreatePage is cuMemCreate: size bytes of physical memory.
func (g *Device) CreatePage(size uint64) (allocator.PageHandle, error) {
	h, _, err := g.call(opCreate, size, uint64(g.ordinal), 0)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	g.pages[allocator.PageHandle(h)] = size
	g.mu.Unlock()
	return allocator.PageHandle(h), nil
}

// Map is cuMemMap of the whole page h at addr. The interface passes no
// size, so the Device remembers each page's from CreatePage.
func (g *Device) Map(addr uint64, h allocator.PageHandle) error {
	g.mu.Lock()
	size, ok := g.pages[h]
	g.mu.Unlock()
	if !ok {
		return fmt.Errorf("cuMemMap: page handle %#x was not created by device %d (or was released)", uint64(h), g.ordinal)
	}
	_, _, err := g.call(opMap, addr, size, uint64(h))
	return err
}

// SetAccess is cuMemSetAccess: read-write for this device.
func (g *Device) SetAccess(addr, size uint64) error {
	_, _, err := g.call(opSetAccess, addr, size, uint64(g.ordinal))
	return err
}

// Unmap is cuMemUnmap.
func (g *Device) Unmap(addr, size uint64) error {
	_, _, err := g.call(opUnmap, addr, size, 0)
	return err
}

// Release is cuMemRelease.
func (g *Device) Release(h allocator.PageHandle) error {
	if _, _, err := g.call(opRelease, uint64(h), 0, 0); err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.pages, h)
	g.mu.Unlock()
	return nil
}

// SynchronizeStream is cuStreamSynchronize. s is the raw CUstream (the
// same value as the runtime's cudaStream_t); 0 is the legacy default
// stream.
func (g *Device) SynchronizeStream(s allocator.Stream) error {
	_, _, err := g.call(opStreamSync, uint64(s), 0, 0)
	return err
}

package gpu

import (
	"cmp"
	"slices"

	"github.com/memreplay/memreplay/allocator"
)

// vmmState is a process's virtual memory management state: address
// reservations, physical pages, and which page backs which granule.
//
// A page may be mapped at several places at once, as the driver allows:
// the stitch policy maps free pages of expandable segments again behind a
// new range. The simulator is stricter than the driver in one place, to
// catch allocator bugs: a page must be unmapped everywhere before it is
// released (CUDA defers the release instead; PyTorch always unmaps first).
type vmmState struct {
	reservations []span // sorted by address
	pages        map[allocator.PageHandle]*page
	// mapped maps the address of each mapped granule to the page backing
	// it, so overlap and coverage checks are per granule and need no
	// interval search.
	mapped   map[uint64]allocator.PageHandle
	lastPage allocator.PageHandle
}

// page is one cuMemCreate allocation.
type page struct {
	size uint64
	maps []uint64 // the addresses it is mapped at
}

// mappingAt returns the address of the mapping of pg that covers a.
func (pg *page) mappingAt(a uint64) uint64 {
	for _, m := range pg.maps {
		if a >= m && a-m < pg.size {
			return m
		}
	}
	return 0
}

func newVMMState() vmmState {
	return vmmState{
		pages:  map[allocator.PageHandle]*page{},
		mapped: map[uint64]allocator.PageHandle{},
	}
}

// reservation returns the reservation holding [addr, addr+size), if any.
func (v *vmmState) reservation(addr, size uint64) (span, bool) {
	i, _ := slices.BinarySearchFunc(v.reservations, addr, func(s span, a uint64) int {
		switch {
		case s.hi <= a:
			return -1
		case s.lo > a:
			return 1
		}
		return 0
	})
	if i == len(v.reservations) {
		return span{}, false
	}
	r := v.reservations[i]
	if addr < r.lo || addr >= r.hi || size > r.hi-addr {
		return span{}, false
	}
	return r, true
}

// Granularity is cuMemGetAllocationGranularity. It cannot fail and is not
// counted: it is a property of the device, asked once.
func (p *Process) Granularity() uint64 { return p.gpu.granularity }

// checkRange validates a page-aligned, non-empty range for call c.
func (p *Process) checkRange(c Call, addr, size uint64) error {
	g := p.gpu.granularity
	if size == 0 || size%g != 0 || addr%g != 0 {
		return invalid(c, "range %#x+%d is not aligned to the granularity %d", addr, size, g)
	}
	if size > maxSize || addr > ^uint64(0)-size {
		return invalid(c, "range %#x+%d overflows", addr, size)
	}
	return nil
}

// ReserveAddress is cuMemAddressReserve. The range comes from the same
// first-fit allocator as cudaMalloc segments, aligned to the larger of the
// granularity and 2 MiB.
func (p *Process) ReserveAddress(size uint64) (uint64, error) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	addr, err := p.reserveAddress(size)
	return addr, p.end(CallAddressReserve, err)
}

func (p *Process) reserveAddress(size uint64) (uint64, error) {
	if err := p.begin(CallAddressReserve); err != nil {
		return 0, err
	}
	g := p.gpu.granularity
	if size == 0 || size%g != 0 {
		return 0, invalid(CallAddressReserve, "size %d is not a positive multiple of the granularity %d", size, g)
	}
	if size > p.gpu.window {
		return 0, p.noAddressSpace(CallAddressReserve, size)
	}
	addr, ok := p.va.alloc(size, max(g, largeAlign))
	if !ok {
		return 0, p.noAddressSpace(CallAddressReserve, size)
	}
	r := span{addr, addr + size}
	i, _ := slices.BinarySearchFunc(p.vmm.reservations, addr, func(s span, a uint64) int {
		return cmp.Compare(s.lo, a)
	})
	p.vmm.reservations = slices.Insert(p.vmm.reservations, i, r)
	return addr, nil
}

// FreeAddress is cuMemAddressFree. As the driver requires, addr and size
// must be exactly a reservation's; nothing may still be mapped in it.
func (p *Process) FreeAddress(addr, size uint64) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallAddressFree, p.freeAddress(addr, size))
}

func (p *Process) freeAddress(addr, size uint64) error {
	if err := p.begin(CallAddressFree); err != nil {
		return err
	}
	i := slices.IndexFunc(p.vmm.reservations, func(s span) bool { return s.lo == addr })
	if i < 0 {
		return invalid(CallAddressFree, "%#x is not a reservation of process %d", addr, p.id)
	}
	r := p.vmm.reservations[i]
	if r.hi-r.lo != size {
		return invalid(CallAddressFree, "size %d does not match the reservation of %d bytes at %#x", size, r.hi-r.lo, addr)
	}
	for a := range p.vmm.mapped {
		if a >= r.lo && a < r.hi {
			return invalid(CallAddressFree, "reservation at %#x still has a page mapped at %#x", addr, a)
		}
	}
	p.vmm.reservations = slices.Delete(p.vmm.reservations, i, i+1)
	p.va.release(addr, size)
	return nil
}

// CreatePage is cuMemCreate: size bytes of physical memory, a multiple of
// the granularity.
func (p *Process) CreatePage(size uint64) (allocator.PageHandle, error) {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	h, err := p.createPage(size)
	return h, p.end(CallCreatePage, err)
}

func (p *Process) createPage(size uint64) (allocator.PageHandle, error) {
	if err := p.begin(CallCreatePage); err != nil {
		return 0, err
	}
	g := p.gpu
	if size == 0 || size%g.granularity != 0 {
		return 0, invalid(CallCreatePage, "size %d is not a positive multiple of the granularity %d", size, g.granularity)
	}
	if !g.hold(p, size) {
		return 0, oom(CallCreatePage)
	}
	p.vmm.lastPage++
	p.vmm.pages[p.vmm.lastPage] = &page{size: size}
	return p.vmm.lastPage, nil
}

var _ allocator.PageRefuser = (*Process)(nil)

// RefusePages says at once whether n CreatePage calls of size bytes in a
// row would run out of memory, and if so counts them as made: the ones
// that fit, the failing one, and the Release of each created page (the
// allocator's cleanup), with their modelled time. It declines (nil) where
// the calls one by one could answer otherwise: a closed process, a sticky
// error, faults armed on either call, an invalid size.
func (p *Process) RefusePages(size, n uint64) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	g := p.gpu
	if p.closed || p.sticky != nil || n == 0 || size == 0 || size%g.granularity != 0 ||
		p.armed(CallCreatePage) || p.armed(CallRelease) {
		return nil
	}
	fit := (g.capacity - g.used) / size
	if fit >= n {
		return nil
	}
	p.tally.chargeN(CallCreatePage, fit+1, g.costs.Of(CallCreatePage))
	p.tally.fail(CallCreatePage)
	p.tally.chargeN(CallRelease, fit, g.costs.Of(CallRelease))
	return oom(CallCreatePage)
}

// Map is cuMemMap: page h at addr, inside one reservation, over granules
// that nothing maps yet.
func (p *Process) Map(addr uint64, h allocator.PageHandle) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallMap, p.mapPage(addr, h))
}

func (p *Process) mapPage(addr uint64, h allocator.PageHandle) error {
	if err := p.begin(CallMap); err != nil {
		return err
	}
	pg, ok := p.vmm.pages[h]
	if !ok {
		return deviceError(CallMap, errInvalidHandle, "page handle %d is not a page of process %d", h, p.id)
	}
	if err := p.checkRange(CallMap, addr, pg.size); err != nil {
		return err
	}
	if _, ok := p.vmm.reservation(addr, pg.size); !ok {
		return invalid(CallMap, "%#x+%d is not inside one reservation", addr, pg.size)
	}
	g := p.gpu.granularity
	for a := addr; a < addr+pg.size; a += g {
		if other, ok := p.vmm.mapped[a]; ok {
			return invalid(CallMap, "%#x is already mapped by page %d", a, other)
		}
	}
	for a := addr; a < addr+pg.size; a += g {
		p.vmm.mapped[a] = h
	}
	pg.maps = append(pg.maps, addr)
	return nil
}

// SetAccess is cuMemSetAccess. Access rights are not modelled further (no
// kernel reads memory here), but the range must be mapped throughout, as
// the driver demands.
func (p *Process) SetAccess(addr, size uint64) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallSetAccess, p.setAccess(addr, size))
}

func (p *Process) setAccess(addr, size uint64) error {
	if err := p.begin(CallSetAccess); err != nil {
		return err
	}
	if err := p.checkRange(CallSetAccess, addr, size); err != nil {
		return err
	}
	return p.checkMapped(CallSetAccess, addr, size)
}

// checkMapped reports the first granule of [addr, addr+size) that no page
// backs.
func (p *Process) checkMapped(c Call, addr, size uint64) error {
	for a := addr; a < addr+size; a += p.gpu.granularity {
		if _, ok := p.vmm.mapped[a]; !ok {
			return invalid(c, "%#x is not mapped", a)
		}
	}
	return nil
}

// Unmap is cuMemUnmap. The range must be mapped throughout and must not
// cut a page's mapping in two.
func (p *Process) Unmap(addr, size uint64) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallUnmap, p.unmap(addr, size))
}

func (p *Process) unmap(addr, size uint64) error {
	if err := p.begin(CallUnmap); err != nil {
		return err
	}
	if err := p.checkRange(CallUnmap, addr, size); err != nil {
		return err
	}
	if err := p.checkMapped(CallUnmap, addr, size); err != nil {
		return err
	}
	end := addr + size
	type mapping struct {
		h  allocator.PageHandle
		at uint64
	}
	var ms []mapping
	for a := addr; a < end; a += p.gpu.granularity {
		h := p.vmm.mapped[a]
		pg := p.vmm.pages[h]
		at := pg.mappingAt(a)
		if at < addr || at+pg.size > end {
			return invalid(CallUnmap, "%#x+%d cuts the mapping of page %d at %#x+%d", addr, size, h, at, pg.size)
		}
		if len(ms) == 0 || ms[len(ms)-1] != (mapping{h, at}) {
			ms = append(ms, mapping{h, at})
		}
	}
	for a := addr; a < end; a += p.gpu.granularity {
		delete(p.vmm.mapped, a)
	}
	for _, m := range ms {
		pg := p.vmm.pages[m.h]
		pg.maps = slices.DeleteFunc(pg.maps, func(at uint64) bool { return at == m.at })
	}
	return nil
}

// Release is cuMemRelease: the physical page goes back to the GPU. It must
// be unmapped first.
func (p *Process) Release(h allocator.PageHandle) error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.end(CallRelease, p.release(h))
}

func (p *Process) release(h allocator.PageHandle) error {
	if err := p.begin(CallRelease); err != nil {
		return err
	}
	pg, ok := p.vmm.pages[h]
	if !ok {
		return deviceError(CallRelease, errInvalidHandle, "page handle %d is not a page of process %d", h, p.id)
	}
	if len(pg.maps) > 0 {
		return invalid(CallRelease, "page %d is still mapped at %#x", h, pg.maps[0])
	}
	delete(p.vmm.pages, h)
	p.gpu.drop(p, pg.size)
	return nil
}

package allocator

import "errors"

// Expandable segments (expandable_segments:True, section 3 of the spec).
//
// A segment is a virtual reservation of ceil(1.125 x device memory / page)
// pages for one stream and pool, with pages of 2 MiB (small pool) or 20 MiB
// (large pool). Its blocks always tile the whole reservation: mapped blocks
// are free or allocated as usual, unmapped ranges are blocks kept in the
// pool's unmapped set. Growing maps whole pages at the lowest address that,
// counting a free mapped block just before it, has room; shrinking
// (empty_cache, malloc's last resort) unmaps the pages that lie entirely
// inside free blocks.

type expandableSegment struct {
	pageSize uint64
	pages    []PageHandle // by page index; valid where mapped is set
	mapped   []bool
}

// tryAllocateExpandableBlock finds or creates room for size bytes, maps what
// is missing, and returns the free mapped block, removed from the free set
// (try_allocate_expandable_block). nil, nil means out of memory.
func (a *Allocator) tryAllocateExpandableBlock(p *params) (*Block, error) {
	c, err := a.findExpandableBlock(p)
	if err != nil {
		return nil, err
	}
	if !c.mapped {
		ok, err := a.mapBlock(c, min(c.size, p.size))
		if !ok || err != nil {
			return nil, err
		}
	}
	for c.size < p.size {
		// c is free and mapped, followed by an unmapped range: map the
		// missing part, which merges into c's successor.
		n := c.next
		ok, err := a.mapBlock(n, min(p.size-c.size, n.size))
		if !ok || err != nil {
			return nil, err
		}
		c = n
	}
	c.pool.free.remove(c)
	return c, nil
}

// findExpandableBlock returns the lowest-address start, on the request's
// stream, of a run of allocatable blocks (a free mapped block followed by
// unmapped ones, or unmapped ones) of at least size bytes, creating a new
// segment when there is none (find_expandable_block).
func (a *Allocator) findExpandableBlock(p *params) (*Block, error) {
	u := &p.pool.unmapped
	for i := u.lowerBound(p.stream, 0); i < len(u.blocks) && u.blocks[i].stream == p.stream; i++ {
		c := u.blocks[i]
		if c.prev.allocatable() {
			c = c.prev
		}
		var bytes uint64
		for b := c; bytes < p.size && b.allocatable(); b = b.next {
			bytes += b.size
		}
		if bytes >= p.size {
			return c, nil
		}
	}
	page := uint64(SmallBuffer)
	if !p.pool.small {
		page = a.largePage()
	}
	total := a.deviceTotal
	n := (total + total/8 + page - 1) / page
	addr, err := a.vm.ReserveAddress(n * page)
	if err != nil {
		return nil, err
	}
	seg := a.newSegment(segment{
		base: addr, size: n * page, stream: p.stream, pool: p.pool,
		exp: &expandableSegment{pageSize: page, pages: make([]PageHandle, n), mapped: make([]bool, n)},
	})
	a.addSegment(seg)
	b := a.newBlock(addr, n*page, p.stream, p.pool, seg)
	b.mapped = false
	seg.head = b
	p.pool.unmapped.insert(b)
	return b, nil
}

// refuseMinPages is the shortest run of pages the allocator asks a
// PageRefuser about; shorter ones cost little page by page.
const refuseMinPages = 16

// mapBlock maps the pages covering the first n bytes of the unmapped block
// b, splits off the unmapped rest, merges b with free mapped neighbours and
// puts it in the free set (map_block). false, nil means the device ran out of
// memory; the pages created so far are released.
func (a *Allocator) mapBlock(b *Block, n uint64) (bool, error) {
	seg := b.seg
	es := seg.exp
	page := es.pageSize
	begin := (b.addr - seg.base) / page
	end := (b.addr + n - seg.base + page - 1) / page
	// Asked only for runs long enough for the calls to matter.
	if r, ok := a.vm.(PageRefuser); ok && end-begin >= refuseMinPages {
		if err := r.RefusePages(page, end-begin); err != nil {
			if errors.Is(err, ErrDeviceOutOfMemory) {
				return false, nil
			}
			return false, err
		}
	}
	for i := begin; i < end; i++ {
		h, err := a.vm.CreatePage(page)
		if err != nil {
			for j := begin; j < i; j++ {
				es.mapped[j] = false
				if rerr := a.vm.Release(es.pages[j]); rerr != nil {
					return false, rerr
				}
			}
			if errors.Is(err, ErrDeviceOutOfMemory) {
				return false, nil
			}
			return false, err
		}
		es.pages[i] = h
		es.mapped[i] = true
	}
	for i := begin; i < end; i++ {
		if err := a.vm.Map(seg.base+i*page, es.pages[i]); err != nil {
			return false, err
		}
	}
	addr := seg.base + begin*page
	size := (end - begin) * page
	if err := a.vm.SetAccess(addr, size); err != nil {
		return false, err
	}

	p := b.pool
	p.unmapped.remove(b)
	b.mapped = true
	if size < b.size {
		rest := a.newBlock(b.addr+size, b.size-size, b.stream, p, seg)
		rest.mapped = false
		splice(rest, b, b.next)
		p.unmapped.insert(rest)
		b.size = size
	}
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	insertFree(b)

	a.totalAllocated += size
	a.stats.ReservedBytes.increase(p.statIdx, int64(size))
	a.stats.NumDeviceAlloc++
	a.record(ActionSegmentMap, addr, size, b.stream)
	return true, nil
}

// unmapBlock unmaps the pages lying entirely inside the free expandable
// block b. Partial pages at either end stay mapped as free blocks of their
// own; the unmapped middle merges with unmapped neighbours (unmap_block).
func (a *Allocator) unmapBlock(b *Block) error {
	seg := b.seg
	es := seg.exp
	page := es.pageSize
	begin := (b.addr - seg.base + page - 1) / page
	end := (b.addr + b.size - seg.base) / page
	if begin >= end {
		return nil
	}
	// Unmapping does not reliably wait for the stream's work, so PyTorch
	// synchronises it first.
	if err := a.vm.SynchronizeStream(seg.stream); err != nil {
		return err
	}
	for i := begin; i < end; i++ {
		if err := a.vm.Unmap(seg.base+i*page, page); err != nil {
			return err
		}
		if err := a.vm.Release(es.pages[i]); err != nil {
			return err
		}
		es.mapped[i] = false
	}
	addr := seg.base + begin*page
	size := (end - begin) * page

	p := b.pool
	p.free.remove(b)
	if before := addr - b.addr; before > 0 {
		bf := a.newBlock(b.addr, before, b.stream, p, seg)
		splice(bf, b.prev, b)
		insertFree(bf)
	}
	if after := b.addr + b.size - (addr + size); after > 0 {
		af := a.newBlock(addr+size, after, b.stream, p, seg)
		splice(af, b, b.next)
		insertFree(af)
	}
	b.addr = addr
	b.size = size
	b.mapped = false
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	p.unmapped.insert(b)

	a.totalAllocated -= size
	a.stats.ReservedBytes.decrease(p.statIdx, int64(size))
	a.stats.NumDeviceFree++
	a.record(ActionSegmentUnmap, addr, size, b.stream)
	return nil
}

// releaseExpandableSegment drops a segment whose whole reservation is one
// unmapped block.
func (a *Allocator) releaseExpandableSegment(b *Block) error {
	seg := b.seg
	if err := a.vm.FreeAddress(seg.base, seg.size); err != nil {
		return err
	}
	b.pool.unmapped.remove(b)
	a.removeSegment(seg)
	a.recycle(b)
	return nil
}

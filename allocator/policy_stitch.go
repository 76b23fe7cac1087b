package allocator

import (
	"errors"

	"github.com/memreplay/memreplay/allocator/config"
)

// The stitch policy: free pages of several ranges behind one new range.
//
// With expandable segments a free block is a run of mapped physical pages,
// and a request larger than every free block needs new pages even when the
// free blocks together hold more than enough. GMLake (ASPLOS'24) answers
// that with the virtual memory calls: a physical page may be mapped at more
// than one virtual address, so the free pages of several blocks can be
// mapped, in order, behind one fresh virtual range, and the program gets a
// contiguous block without the device giving out a byte more. The stitch
// policy does that on PyTorch's expandable segments.
//
// Pages. Stitching lends whole pages only, so the large pool's pages are
// 2 MiB (the small pool's size and the usual device granularity) instead
// of PyTorch's 20 MiB: a free block lends the whole pages inside it, and a
// stitched block wastes less than one page at its end. The policy turns
// expandable_segments on: without them there are no pages to lend.
//
// Stitching. When best fit finds no free block for a large request, the
// policy takes the free blocks of the request's stream and pool, largest
// first, and counts the whole pages inside them until it has the pages the
// request needs. When they fall short but some exist, the shortfall is
// mapped as new pages into the stream's reservation first (as expandable
// growth would), where it joins the free pages, so the new memory is the
// shortfall alone and not the whole request (and when the new pages make
// one free block large enough, it serves the request without a stitch).
// Without free pages the request grows a segment as PyTorch's does. The chosen pages are cut out of their
// free blocks (what is left of each block stays free), marked as lent to
// the stitched range, and mapped in order behind one new reservation of
// exactly the pages' size (cuMemAddressReserve, one cuMemMap per page,
// cuMemSetAccess). The stitched range is a segment of its own holding one
// block, handed out whole.
//
// Unstitching. Freeing the stitched block (or its last record-stream event
// completing) unmaps the range after synchronising its stream, frees the
// reservation, and returns the lent blocks to their segments as free
// blocks, merged with their free neighbours. A stitched range never serves
// a second request: ranges are made for the request that needs them, so no
// cache of stitched ranges pins pages.
//
// Accounting. A page is reserved once, in the segment it was created in:
// lent blocks count in reserved_bytes there and nowhere else, the stitched
// block counts in allocated, active and requested bytes as any block does,
// and the stitched range adds no reserved bytes and no segment. PyTorch's
// statistics keep their meanings; num_stitches, num_unstitches and
// stitched_bytes (the virtual address space of live stitched ranges) are
// added to the statistics of a stitching allocator.
//
// Observers see the address space: a stitch is an unmap of each lent range
// and a map of the stitched range (segment_unmap, segment_map), an
// unstitch the reverse, so that a profiler's reconstruction of the layout
// at a peak and a recorded trace follow the virtual addresses, and the
// bytes they count as reserved do not change. A snapshot, in the same
// view, shows the stitched range as a segment of its own and leaves the
// lent ranges out of theirs.
//
// Costs. A stitch makes 1 + pages + 1 device calls (reserve, maps, access)
// and an unstitch 3 (synchronise, unmap, free the reservation); 2 MiB pages
// make ten times more map and unmap calls than PyTorch's 20 MiB pages when
// segments grow and shrink. Address space: each live stitched range its
// own size, on top of the expandable reservations. Time: a cache hit pays
// one nil test; a miss walks the stream's free blocks from the largest
// until it has the pages.
//
// The code uses the same words: tryStitch gathers and maps, lend cuts the
// pages out of a free block, unstitch gives them back.

// Stitch is GMLake's stitching on expandable segments. Sizes are PyTorch's.
type Stitch struct{ PyTorch }

// Name implements Policy.
func (Stitch) Name() string { return "stitch" }

func (Stitch) engine(a *Allocator, cfg *config.Config) error {
	cfg.ExpandableSegments = true
	a.stitch = &stitchState{}
	a.stats.Stitching = true
	return nil
}

type stitchState struct {
	runs []pageRun // scratch
}

// pageRun is the pages [first, last) of a free block's expandable segment.
type pageRun struct {
	b           *Block
	first, last uint64
}

// stitchedRange is the extra state of a stitched segment: the lent blocks
// whose pages it maps, in its address order.
type stitchedRange struct {
	lent []*Block
}

// largePage is the page size of the large pool's expandable segments.
func (a *Allocator) largePage() uint64 {
	if a.stitch != nil {
		return SmallBuffer
	}
	return a.cfg.LargeSegmentSize
}

// tryStitch returns a stitched block of whole pages for p (stitched set),
// or a free block that the pages mapped for the shortfall made large
// enough, removed from the free set, or nil when there are no free pages to
// stitch (or no memory for the shortfall): then malloc goes on as PyTorch's
// does.
func (a *Allocator) tryStitch(p *params) (b *Block, stitched bool, err error) {
	if !a.cfg.ExpandableSegments || p.pool.small {
		return nil, false, nil
	}
	page := a.largePage()
	need := (p.size + page - 1) / page
	have := a.gatherPages(p, page, need)
	if have == 0 {
		return nil, false, nil
	}
	if have < need {
		ok, err := a.growPages(p, (need-have)*page)
		if !ok || err != nil {
			return nil, false, err
		}
		// The new pages may have joined a free block into one that fits:
		// then no stitch is needed.
		if b := a.getFreeBlock(p); b != nil {
			return b, false, nil
		}
		if a.gatherPages(p, page, need) < need {
			return nil, false, nil
		}
	}
	runs := a.stitch.runs
	va, err := a.vm.ReserveAddress(need * page)
	if err != nil {
		if errors.Is(err, ErrDeviceOutOfMemory) {
			return nil, false, nil // no address space: grow instead
		}
		return nil, false, err
	}
	seg := a.newSegment(segment{base: va, size: need * page, stream: p.stream, pool: p.pool,
		stitch: &stitchedRange{lent: make([]*Block, 0, len(runs))}})
	at := va
	for _, r := range runs {
		es := r.b.seg.exp
		for i := r.first; i < r.last; i++ {
			if err := a.vm.Map(at, es.pages[i]); err != nil {
				return nil, false, err
			}
			at += page
		}
	}
	if err := a.vm.SetAccess(va, seg.size); err != nil {
		return nil, false, err
	}
	for _, r := range runs {
		l := a.lend(r, seg)
		seg.stitch.lent = append(seg.stitch.lent, l)
		a.record(ActionSegmentUnmap, l.addr, l.size, l.stream)
	}
	a.record(ActionSegmentMap, va, seg.size, p.stream)
	a.addSegment(seg)
	b = a.newBlock(va, seg.size, p.stream, p.pool, seg)
	seg.head = b
	a.stats.NumStitches++
	a.stats.StitchedBytes.increase(int64(seg.size))
	return b, true, nil
}

// gatherPages fills a.stitch.runs with whole free pages of p's stream and
// pool, from the largest free blocks down, up to need pages, and returns
// how many it found.
func (a *Allocator) gatherPages(p *params, page, need uint64) uint64 {
	runs := a.stitch.runs[:0]
	fs := &p.pool.free
	// The last free block of the stream is the largest.
	b := fs.lowerBound(p.stream+1, 0)
	if b == nil || p.stream == ^Stream(0) {
		b = fs.last()
	} else {
		b = fs.prev(b)
	}
	var have uint64
	for ; b != nil && b.stream == p.stream && have < need && b.size >= page; b = fs.prev(b) {
		if !b.expandable() || b.seg.exp.pageSize != page {
			continue
		}
		base := b.seg.base
		first := (b.addr - base + page - 1) / page
		last := (b.addr + b.size - base) / page
		if first >= last {
			continue
		}
		take := min(last-first, need-have)
		runs = append(runs, pageRun{b: b, first: first, last: first + take})
		have += take
	}
	a.stitch.runs = runs
	return have
}

// growPages maps at least n new bytes of pages into the unmapped ranges of
// p's stream, lowest address first, as free blocks. false, nil: the device
// or the memory fraction said no.
func (a *Allocator) growPages(p *params, n uint64) (bool, error) {
	if a.setFraction && a.totalAllocated+n > a.allowedMax {
		return false, nil
	}
	u := &p.pool.unmapped
	for n > 0 {
		i := u.lowerBound(p.stream, 0)
		if i >= len(u.blocks) || u.blocks[i].stream != p.stream {
			return false, nil
		}
		c := u.blocks[i]
		m := min(n, c.size)
		ok, err := a.mapBlock(c, m)
		if !ok || err != nil {
			return false, err
		}
		n -= m
	}
	return true, nil
}

// lend cuts the pages of r out of its free block: the block becomes the
// lent pages, what lies before and after them stays free.
func (a *Allocator) lend(r pageRun, seg *segment) *Block {
	b := r.b
	base := b.seg.base
	page := b.seg.exp.pageSize
	lo, hi := base+r.first*page, base+r.last*page
	b.pool.free.remove(b)
	if before := lo - b.addr; before > 0 {
		bf := a.newBlock(b.addr, before, b.stream, b.pool, b.seg)
		splice(bf, b.prev, b)
		insertFree(bf)
	}
	if after := b.addr + b.size - hi; after > 0 {
		af := a.newBlock(hi, after, b.stream, b.pool, b.seg)
		splice(af, b, b.next)
		insertFree(af)
	}
	b.addr, b.size = lo, hi-lo
	b.allocated = true
	b.lentTo = seg
	return b
}

// unstitch frees the stitched block b: the range is unmapped and its
// reservation freed, and the lent blocks return to their segments.
func (a *Allocator) unstitch(b *Block) error {
	seg := b.seg
	if err := a.vm.SynchronizeStream(seg.stream); err != nil {
		return err
	}
	if err := a.vm.Unmap(seg.base, seg.size); err != nil {
		return err
	}
	if err := a.vm.FreeAddress(seg.base, seg.size); err != nil {
		return err
	}
	a.record(ActionSegmentUnmap, seg.base, seg.size, seg.stream)
	for _, l := range seg.stitch.lent {
		a.record(ActionSegmentMap, l.addr, l.size, l.stream)
		l.allocated = false
		l.lentTo = nil
		a.tryMerge(l, l.prev)
		a.tryMerge(l, l.next)
		insertFree(l)
	}
	a.stats.NumUnstitches++
	a.stats.StitchedBytes.decrease(int64(seg.size))
	a.removeSegment(seg)
	a.recycle(b)
	return nil
}

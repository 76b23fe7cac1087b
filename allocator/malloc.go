package allocator

import (
	"errors"

	"github.com/memreplay/memreplay/allocator/config"
)

// DeviceCachingAllocator::malloc (docs/pytorch-caching-allocator.md 2.4)
// begins in Malloc, after the lock is taken: the pending events, the
// rounding, and the plan policy's planned path.

// mallocRounded is malloc's online path for a rounded size.
func (a *Allocator) mallocRounded(origSize, size uint64, stream Stream) (*Block, error) {
	// allocSize is needed only when no cached block fits: allocSlow sets it.
	p := params{size: size, stream: stream, pool: a.poolFor(size)}
	predictedLong := false
	if a.life != nil {
		predictedLong = a.life.choosePool(a, &p)
	}
	b := a.getFreeBlock(&p)
	if b == nil && a.life != nil && !predictedLong {
		b = a.life.borrow(a, &p)
	}
	if b == nil && a.stitch != nil {
		sb, stitched, err := a.tryStitch(&p)
		if err != nil {
			return nil, a.fail(err)
		}
		if stitched {
			return a.allocFoundBlock(&p, sb, origSize, false), nil
		}
		b = sb
	}
	if b == nil {
		var err error
		if b, err = a.allocSlow(&p); err != nil {
			return nil, a.fail(err)
		}
		if b == nil {
			return nil, a.outOfMemory(&p, origSize)
		}
	}
	var split bool
	if a.pytorch {
		split = PyTorch{}.ShouldSplit(&a.cfg, b.size, size, p.pool.small)
	} else {
		split = a.policy.ShouldSplit(&a.cfg, b.size, size, p.pool.small)
	}
	b = a.allocFoundBlock(&p, b, origSize, split)
	if a.life != nil {
		a.life.allocated(a, b, size, predictedLong)
	}
	return b, nil
}

// allocSlow is the fallback chain when no cached block fits: GC, a new
// segment, releasing oversize cached blocks, releasing the whole cache and a
// counted retry. A nil block with a nil error means out of memory.
func (a *Allocator) allocSlow(p *params) (*Block, error) {
	p.allocSize = a.policy.AllocationSize(&a.cfg, p.size)
	if a.gcActive() {
		if err := a.garbageCollect(); err != nil {
			return nil, err
		}
	}
	b, err := a.allocBlock(p, false)
	if b != nil || err != nil {
		return b, err
	}
	released, err := a.releaseAvailableCachedBlocks(p)
	if err != nil {
		return nil, err
	}
	if released {
		if b, err = a.allocBlock(p, false); b != nil || err != nil {
			return b, err
		}
	}
	if err := a.releaseCachedBlocks(); err != nil {
		return nil, err
	}
	return a.allocBlock(p, true)
}

// getFreeBlock is best fit: the first free block at or after (stream, size,
// 0), subject to the expandable and oversize rules (2.2). The block is
// removed from the free set.
func (a *Allocator) getFreeBlock(p *params) *Block {
	fs := &p.pool.free
	if a.gcActive() {
		p.pool.getFreeBlocksCallCount++
	}
	if fs.len() == 0 {
		return nil
	}
	b := fs.lowerBound(p.stream, p.size)
	if b == nil || b.stream != p.stream {
		return nil
	}
	if b.expandable() {
		if a.cfg.ExpandableSegments {
			// A growable tail counts as the size it can grow to, so a block
			// that cannot grow is preferred when it fits. One that cannot
			// grow is already the answer: every later block is at least as
			// large, so the set is not walked (the cache hit's usual case).
			for b.expandable() && expandableSize(b) != b.size {
				n := fs.next(b)
				if n == nil || n.stream != p.stream || expandableSize(n) >= expandableSize(b) {
					break
				}
				b = n
			}
		} else {
			// Expandable segments were switched off after some were made:
			// honour that by skipping their blocks.
			for b != nil && b.expandable() && b.stream == p.stream {
				b = fs.next(b)
			}
			if b == nil || b.stream != p.stream {
				return nil
			}
		}
	}
	maxSplit := a.cfg.MaxSplitSize
	if p.size < maxSplit && b.size >= maxSplit {
		return nil // never hand an oversize block to a small request
	}
	if p.size >= maxSplit && b.size >= p.size+a.cfg.MaxNonSplitRoundingSize {
		return nil // an oversize request may waste only the rounding slack
	}
	fs.remove(b)
	return b
}

func expandableSize(b *Block) uint64 {
	if b.next != nil && !b.next.mapped {
		return b.size + b.next.size
	}
	return b.size
}

// allocBlock gets new memory from the device: a segment of allocSize, or
// with expandable segments pages mapped into a reservation. A nil block with
// a nil error means the device (or the memory fraction) said no.
func (a *Allocator) allocBlock(p *params, isRetry bool) (*Block, error) {
	if isRetry {
		a.stats.NumAllocRetries++
	}
	if a.setFraction && a.totalAllocated+p.allocSize > a.allowedMax {
		return nil, nil
	}
	if a.cfg.ExpandableSegments {
		return a.tryAllocateExpandableBlock(p)
	}
	addr, err := a.dev.Malloc(p.allocSize)
	if err != nil {
		if errors.Is(err, ErrDeviceOutOfMemory) {
			return nil, nil
		}
		return nil, err
	}
	size := p.allocSize
	a.totalAllocated += size
	seg := a.newSegment(segment{base: addr, size: size, stream: p.stream, pool: p.pool})
	a.addSegment(seg)
	b := a.newBlock(addr, size, p.stream, p.pool, seg)
	seg.head = b
	a.stats.Segment.increase(p.pool.statIdx, 1)
	a.stats.ReservedBytes.increase(p.pool.statIdx, int64(size))
	if size >= a.cfg.MaxSplitSize {
		a.stats.OversizeSegments.increase(1)
	}
	a.stats.NumDeviceAlloc++
	a.record(ActionSegmentAlloc, addr, size, p.stream)
	return b, nil
}

func (a *Allocator) addSegment(s *segment) {
	s.index = len(a.segments)
	a.segments = append(a.segments, s)
}

func (a *Allocator) removeSegment(s *segment) {
	last := a.segments[len(a.segments)-1]
	a.segments[s.index] = last
	last.index = s.index
	a.segments[len(a.segments)-1] = nil
	a.segments = a.segments[:len(a.segments)-1]
}

// allocFoundBlock hands out the front of b, splitting off the tail when
// split is set, and updates the statistics as alloc_found_block does.
func (a *Allocator) allocFoundBlock(p *params, b *Block, origSize uint64, split bool) *Block {
	st := &a.stats
	pi := p.pool.statIdx
	alreadySplit := b.isSplit()
	expandable := b.expandable()
	if split {
		// The original block object keeps the tail; a new one takes the front.
		rest := b
		b = a.newBlockIn(rest.addr, p.size, p.stream, p.pool, rest.seg, expandable)
		splice(b, rest.prev, rest)
		rest.addr += p.size
		rest.size -= p.size
		insertFree(rest)
		if !expandable {
			if alreadySplit {
				st.InactiveSplitBytes.decrease(pi, int64(b.size))
			} else {
				st.InactiveSplitBytes.increase(pi, int64(rest.size))
				st.InactiveSplit.increase(pi, 1)
			}
		}
	} else if alreadySplit && !expandable {
		st.InactiveSplitBytes.decrease(pi, int64(b.size))
		st.InactiveSplit.decrease(pi, 1)
	}
	b.allocated = true
	b.requested = origSize
	a.record(ActionAlloc, b.addr, origSize, b.stream)
	st.Allocation.increase(pi, 1)
	st.AllocatedBytes.increase(pi, int64(b.size))
	st.Active.increase(pi, 1)
	st.ActiveBytes.increase(pi, int64(b.size))
	st.RequestedBytes.increase(pi, int64(origSize))
	if b.size >= a.cfg.MaxSplitSize {
		st.OversizeAllocations.increase(1)
	}
	return b
}

// insertFree puts b into its pool's free set and starts its GC age
// (insert_into_blocks). It inlines, so that a free or a split makes one
// call to insert, not two (issue 19): a plain function, since it does not
// use the allocator, and calling insertPlacing, which takes an empty hot
// place too, since freeSet.insert's own test put it over the budget.
func insertFree(b *Block) {
	p := b.pool
	b.gcCountBase = p.getFreeBlocksCallCount
	p.free.insertPlacing(b)
}

// outOfMemory is malloc's last step: the oom trace entry, num_ooms and the
// error.
func (a *Allocator) outOfMemory(p *params, origSize uint64) error {
	free, total, err := a.dev.MemGetInfo()
	if err != nil {
		return a.fail(err)
	}
	if a.observed.Has(ActionOOM) {
		a.emit(TraceEntry{Action: ActionOOM, Size: p.size, Stream: p.stream, DeviceFree: free})
	}
	a.stats.NumOOMs++
	e := &OutOfMemoryError{
		Device:      a.device,
		Requested:   origSize,
		Rounded:     p.size,
		AllocSize:   p.allocSize,
		DeviceFree:  free,
		DeviceTotal: total,
		Allocated:   uint64(a.stats.AllocatedBytes[StatAll].Current),
		Reserved:    uint64(a.stats.ReservedBytes[StatAll].Current),
	}
	if a.setFraction {
		e.Allowed, e.Limited = a.allowedMax, true
	}
	if pl, ok := a.dev.(ProcessLister); ok {
		e.Processes = pl.ComputeProcesses()
	}
	return e
}

// garbageCollect frees whole free segments of the large pool whose age is at
// least the average, pass after pass, until the bytes above
// garbage_collection_threshold * allowed are reclaimed or nothing more can
// go (2.7). Unlike releaseCachedBlocks it waits for no events.
func (a *Allocator) garbageCollect() error {
	threshold := uint64(a.cfg.GarbageCollectionThreshold * float64(a.allowedMax))
	if a.totalAllocated <= threshold {
		return nil
	}
	target := a.totalAllocated - threshold
	blocks := a.large.free.appendAll(nil)
	var totalAge uint64
	count := 0
	// PyTorch counts unsplit expandable blocks in the average but never
	// frees them; they practically never exist (the unmapped rest of the
	// reservation is a neighbour).
	for _, b := range blocks {
		if !b.isSplit() {
			totalAge += b.gcAge()
			count++
		}
	}
	if count == 0 {
		return nil
	}
	var reclaimed uint64
	freed := true
	for reclaimed < target && freed && count > 0 {
		threshold := float64(totalAge) / float64(count)
		freed = false
		// Walk a copy: releasing removes blocks from the set.
		blocks = a.large.free.appendAll(blocks[:0])
		for _, b := range blocks {
			if b.isSplit() || b.expandable() || float64(b.gcAge()) < threshold {
				continue
			}
			freed = true
			reclaimed += b.size
			totalAge -= b.gcAge()
			count--
			if err := a.releaseBlock(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseAvailableCachedBlocks frees cached oversize blocks of the request's
// stream and pool: one block at least as large as the request (or
// max_split_size), else the largest ones below that until that much is
// freed (2.8). It does nothing without max_split_size.
func (a *Allocator) releaseAvailableCachedBlocks(p *params) (bool, error) {
	maxSplit := a.cfg.MaxSplitSize
	if maxSplit == config.Unlimited {
		return false, nil
	}
	fs := &p.pool.free
	key := max(p.size, maxSplit)
	b := fs.lowerBound(p.stream, key)
	// An oversize block of a cudaMalloc segment is the whole segment,
	// unless expandable_segments was switched on at run time: should_split
	// then splits every large block, and releasing a split block would free
	// the segment under its neighbours. Such blocks stay cached.
	if b != nil && b.stream == p.stream && !b.expandable() && !b.isSplit() {
		return true, a.releaseBlock(b)
	}
	// No single block is large enough: free oversize blocks from the
	// largest down, starting just before the lower bound.
	var cur *Block
	if b == nil {
		cur = fs.last()
	} else {
		cur = fs.prev(b)
	}
	var released uint64
	for cur != nil && released < key && cur.size >= maxSplit && cur.stream == p.stream {
		prev := fs.prev(cur)
		if !cur.expandable() && !cur.isSplit() {
			size := cur.size
			if err := a.releaseBlock(cur); err != nil {
				return false, err
			}
			released += size
		}
		cur = prev
	}
	return released >= key, nil
}

package allocator

// releaseCachedBlocks is empty_cache and malloc's last resort: wait for all
// pending events, then free every fully free segment and unmap every whole
// free page, large pool first (release_cached_blocks).
func (a *Allocator) releaseCachedBlocks() error {
	if err := a.synchronizeAndFreeEvents(); err != nil {
		return err
	}
	// a.pools is large, small under PyTorch; Lifetime's long pools follow
	// their transient ones.
	for _, p := range a.pools {
		if err := a.releaseBlocks(p); err != nil {
			return err
		}
	}
	return nil
}

// releaseBlocks frees the pool's free blocks that are whole segments, in
// set order, then unmaps the whole pages of its free expandable blocks
// (release_blocks).
func (a *Allocator) releaseBlocks(p *pool) error {
	if p.free.len() == 0 {
		return nil
	}
	var toUnmap []*Block
	for _, b := range p.free.appendAll(nil) {
		if b.expandable() {
			toUnmap = append(toUnmap, b)
		} else if !b.isSplit() {
			if err := a.releaseBlock(b); err != nil {
				return err
			}
		}
	}
	for _, b := range toUnmap {
		if err := a.unmapBlock(b); err != nil {
			return err
		}
		if !b.isSplit() {
			if err := a.releaseExpandableSegment(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseBlock returns a whole free segment to the device (release_block).
// The device is asked first, so a failure leaves the allocator unchanged.
func (a *Allocator) releaseBlock(b *Block) error {
	if err := a.dev.Free(b.addr); err != nil {
		return err
	}
	a.stats.NumDeviceFree++
	a.record(ActionSegmentFree, b.addr, b.size, b.stream)
	a.totalAllocated -= b.size
	pi := b.pool.statIdx
	a.stats.Segment.decrease(pi, 1)
	a.stats.ReservedBytes.decrease(pi, int64(b.size))
	if b.size >= a.cfg.MaxSplitSize {
		a.stats.OversizeSegments.decrease(1)
	}
	b.pool.free.remove(b)
	a.removeSegment(b.seg)
	a.recycle(b)
	return nil
}

package allocator

import (
	"errors"
	"fmt"
)

// Restoring a recorded state.
//
// A trace recorded after the model was loaded, or whose ring buffer dropped
// its oldest entries, begins with segments and live blocks that the trace
// never created. Restore rebuilds such a state directly: each segment is
// obtained from the device with one Malloc of its exact size (so the device
// accounts for it and, in a replayer, can hand back the recorded address),
// then cut into the given blocks. Allocated blocks come back as handles the
// caller frees later; free blocks go into the pool's free set, merged with
// free neighbours as free_block would have left them.
//
// Statistics count the restored state as current (and peak) values, but
// num_device_alloc does not count the segments: those cudaMallocs happened
// before the trace. Expandable segments cannot be restored (their page
// tables are not in a snapshot); Restore refuses them.

// RestoreSegment describes one segment to rebuild.
type RestoreSegment struct {
	Size   uint64
	Stream Stream
	Small  bool // the small pool's segment (PyTorch's segment_type "small")
	// Blocks tile the segment in address order; their sizes must add up to
	// Size.
	Blocks []RestoreBlock
}

// RestoreBlock is one block of a restored segment.
type RestoreBlock struct {
	Size      uint64
	Requested uint64 // the caller's size; for a free block, PyTorch's stale value
	Allocated bool
}

// Restore rebuilds segs and returns, per segment, the base address the
// device gave it and the handles of its allocated blocks in order. On error
// nothing of the failing segment is kept; earlier segments stay.
func (a *Allocator) Restore(segs []RestoreSegment) (bases []uint64, blocks [][]*Block, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fatal != nil {
		return nil, nil, a.fatal
	}
	// Sized once: the replay restores thousands of segments, one call
	// each, and growing these by append was most of Restore's allocations.
	live := 0
	for _, s := range segs {
		for _, b := range s.Blocks {
			if b.Allocated {
				live++
			}
		}
	}
	bases = make([]uint64, 0, len(segs))
	blocks = make([][]*Block, 0, len(segs))
	all := make([]*Block, 0, live) // every segment's handles, in one array
	for i, s := range segs {
		n := len(all)
		base, grown, err := a.restoreSegment(s, all)
		if err != nil {
			return bases, blocks, fmt.Errorf("allocator: restoring segment %d: %w", i, err)
		}
		all = grown
		var bl []*Block // nil for a segment with no allocated block, as before
		if len(all) > n {
			bl = all[n:len(all):len(all)]
		}
		bases = append(bases, base)
		blocks = append(blocks, bl)
	}
	if a.check {
		a.mustCheck()
	}
	return bases, blocks, nil
}

// restoreSegment restores s and appends the handles of its allocated
// blocks to live; on error live comes back as it was given.
func (a *Allocator) restoreSegment(s RestoreSegment, live []*Block) (uint64, []*Block, error) {
	if a.cfg.ExpandableSegments {
		return 0, live, errors.New("cannot restore segments under expandable_segments:True")
	}
	var sum uint64
	for _, b := range s.Blocks {
		if b.Size == 0 {
			return 0, live, errors.New("block of size 0")
		}
		sum += b.Size
	}
	if len(s.Blocks) == 0 || sum != s.Size {
		return 0, live, fmt.Errorf("blocks add up to %d bytes, segment has %d", sum, s.Size)
	}
	p := &a.large
	if s.Small {
		p = &a.small
	}
	if a.setFraction && a.totalAllocated+s.Size > a.allowedMax {
		return 0, live, fmt.Errorf("segment of %d bytes exceeds the memory fraction", s.Size)
	}
	addr, err := a.dev.Malloc(s.Size)
	if err != nil {
		return 0, live, err
	}
	a.totalAllocated += s.Size
	seg := a.newSegment(segment{base: addr, size: s.Size, stream: s.Stream, pool: p})
	a.addSegment(seg)
	st := &a.stats
	pi := p.statIdx
	st.Segment.increase(pi, 1)
	st.ReservedBytes.increase(pi, int64(s.Size))
	if s.Size >= a.cfg.MaxSplitSize {
		st.OversizeSegments.increase(1)
	}

	var prev *Block
	at := addr
	for _, rb := range s.Blocks {
		if !rb.Allocated && prev != nil && !prev.allocated {
			// Adjacent free blocks never exist in a settled allocator.
			prev.size += rb.Size
			at += rb.Size
			continue
		}
		b := a.newBlock(at, rb.Size, s.Stream, p, seg)
		splice(b, prev, nil)
		b.requested = rb.Requested
		if rb.Allocated {
			b.allocated = true
			live = append(live, b)
			st.Allocation.increase(pi, 1)
			st.AllocatedBytes.increase(pi, int64(b.size))
			st.Active.increase(pi, 1)
			st.ActiveBytes.increase(pi, int64(b.size))
			st.RequestedBytes.increase(pi, int64(b.requested))
			if b.size >= a.cfg.MaxSplitSize {
				st.OversizeAllocations.increase(1)
			}
		}
		at += rb.Size
		prev = b
	}
	for b := seg.head; b != nil; b = b.next {
		if b.allocated {
			continue
		}
		insertFree(b)
		if b.isSplit() {
			st.InactiveSplit.increase(pi, 1)
			st.InactiveSplitBytes.increase(pi, int64(b.size))
		}
	}
	return addr, live, nil
}

package profiler

import (
	"cmp"
	"math/bits"
	"slices"
	"sort"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// Reconstructing the state at a peak.
//
// A capture needs the allocator's segments and blocks as they were at the
// peak. Walking them at every new peak would cost O(blocks) each time, and
// in a training loop's first iteration nearly every allocation is a new
// peak (activations accumulate while temporaries come and go), which makes
// the walks quadratic. So a new peak only marks a position in the device's
// undo log; from then on the log records every change to blocks and
// segments (allocations, frees, pending blocks returning to their pool,
// segments obtained and released, expandable pages mapped and unmapped). A
// later peak moves the mark and drops the entries before it. The state is
// reconstructed once: at Finish, or when the log grows longer than the
// state itself (so the work is O(1) per event amortized), by taking the
// allocator's snapshot and undoing the log backwards.
//
// The capture keeps the walk itself too (Capture.Layout: each segment or
// mapped run with its active blocks), so that a report can draw the
// segment map the figures were computed from.
//
// Free blocks are then the gaps between active (allocated or pending)
// blocks inside segments and mapped runs: the allocator merges a free block
// with free neighbours, so each gap is one free block, as FreeSummary
// counts them. Undoing an unmap joins the mapped runs it touches; two
// expandable reservations that happen to be adjacent in the address space
// would then count as one run (the snapshot keeps them apart).
//
// A Free's block that does not return to its pool within the free waits
// for record-stream events; its size is kept (devState.pendingFree) until
// the observer sees it return, so that the return can be logged and
// undone.

// span is a segment, or a mapped run of an expandable segment.
type span struct {
	addr, size, stream uint64
	expandable         bool
}

// bySpanAddress orders spans for slices.SortFunc (sort.Slice's reflection
// swapper cost more than the comparisons; the order is the same pdqsort's).
func bySpanAddress(a, b span) int { return cmp.Compare(a.addr, b.addr) }

func (s span) end() uint64 { return s.addr + s.size }

// activeBlock is a block that is allocated or waiting for record-stream
// events.
type activeBlock struct {
	size      uint64
	allocated bool
	stack     trace.StackID
}

// siteKey groups a capture's bytes.
type siteKey struct {
	stack  trace.StackID
	device int32
	stream uint64
}

// reconstruct builds the capture of the moment each device's log mark
// stands for; event and the three counters describe that moment.
func (p *Profiler) reconstruct(devs []*devState, marks []int, event int64, live, requested, reserved uint64) *Capture {
	p.ncap++
	c := &Capture{Event: event, LiveBytes: live, RequestedBytes: requested, ReservedBytes: reserved}
	index := map[siteKey]int{}
	var sites []SiteBytes
	get := func(k siteKey) *SiteBytes {
		i, ok := index[k]
		if !ok {
			i = len(sites)
			sites = append(sites, SiteBytes{Stack: k.stack, Device: k.device, Stream: k.stream})
			index[k] = i
		}
		return &sites[i]
	}
	for i, d := range devs {
		d.reconstruct(marks[i], c, get)
	}
	c.ExternalFragmentation = fragmentation(c.FreeBytes, c.LargestFreeBlockBytes)
	if len(devs) == 1 {
		devs[0].noteFrag(c.ExternalFragmentation)
	}
	if len(devs) == len(p.order) {
		p.total.noteFrag(c.ExternalFragmentation)
	}
	sort.Slice(sites, func(i, j int) bool {
		a, b := &sites[i], &sites[j]
		if x, y := a.LiveBytes+a.StrandedBytes, b.LiveBytes+b.StrandedBytes; x != y {
			return x > y
		}
		if a.Stack != b.Stack {
			return a.Stack < b.Stack
		}
		if a.Device != b.Device {
			return a.Device < b.Device
		}
		return a.Stream < b.Stream
	})
	c.Sites = sites
	return c
}

// reconstruct adds one device's state at log position mark to c.
func (d *devState) reconstruct(mark int, c *Capture, get func(siteKey) *SiteBytes) {
	snap := d.a.Snapshot()
	// The maps are sized for the state now: grown from nothing, they were
	// rehashed a dozen times on a snapshot of thousands of blocks.
	nb := 0
	for i := range snap.Segments {
		nb += len(snap.Segments[i].Blocks)
	}
	segs := make(map[uint64]span, len(snap.Segments)) // plain segments by address
	var runs []span                                   // expandable mapped runs, sorted by address
	active := make(map[uint64]activeBlock, nb)
	for i := range snap.Segments {
		si := &snap.Segments[i]
		sp := span{addr: si.Address, size: si.TotalSize, stream: uint64(si.Stream), expandable: si.IsExpandable}
		if si.IsExpandable {
			runs = append(runs, sp)
		} else {
			segs[sp.addr] = sp
		}
		for _, b := range si.Blocks {
			switch b.State {
			case allocator.StateActiveAllocated:
				stack, _ := d.addrs.get(b.Address) // unknown blocks go to site 0
				active[b.Address] = activeBlock{size: b.Size, allocated: true, stack: stack}
			case allocator.StateActivePendingFree:
				active[b.Address] = activeBlock{size: b.Size}
			}
		}
	}
	// Undo, newest first.
	for i := len(d.log) - 1; i >= mark && i >= 0; i-- {
		e := &d.log[i]
		switch e.kind {
		case logAlloc:
			delete(active, e.addr)
		case logFree:
			active[e.addr] = activeBlock{size: e.size, allocated: true, stack: e.stack}
		case logComplete:
			active[e.addr] = activeBlock{size: e.size}
		case logSegAlloc:
			delete(segs, e.addr)
		case logSegFree:
			segs[e.addr] = span{addr: e.addr, size: e.size, stream: e.stream}
		case logMap:
			runs = unmapRange(runs, e.addr, e.addr+e.size)
		case logUnmap:
			runs = mapRange(runs, span{addr: e.addr, size: e.size, stream: e.stream, expandable: true})
		}
	}
	all := runs
	for _, sp := range segs {
		all = append(all, sp)
	}
	slices.SortFunc(all, bySpanAddress)
	addrs := make([]uint64, 0, len(active))
	for a := range active {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)

	// Sweep spans and blocks together, both by address.
	k := 0
	type held struct {
		key  siteKey
		size uint64
	}
	var blocks []held
	// The layouts' blocks are carved from one array (each active block
	// lies in one span at most), and the layouts are appended to a slice
	// grown once: a capture of thousands of segments grew one slice each.
	layBlocks := make([]BlockLayout, 0, len(addrs))
	c.Layout = slices.Grow(c.Layout, len(all))
	for _, sp := range all {
		for k < len(addrs) && addrs[k] < sp.addr {
			k++ // outside every span: cannot happen in a consistent state
		}
		c.Segments++
		var allocated uint64
		blocks = blocks[:0]
		lay := SegmentLayout{Device: d.index, Stream: sp.stream, Address: sp.addr, Size: sp.size,
			Expandable: sp.expandable}
		first := len(layBlocks)
		pos := sp.addr
		for ; k < len(addrs) && addrs[k] < sp.end(); k++ {
			a := addrs[k]
			b := active[a]
			layBlocks = append(layBlocks, BlockLayout{Offset: a - sp.addr, Size: b.size, Allocated: b.allocated, Stack: b.stack})
			if a > pos {
				gap := a - pos
				c.FreeBytes += gap
				c.LargestFreeBlockBytes = max(c.LargestFreeBlockBytes, gap)
			}
			pos = max(pos, a+b.size)
			if b.allocated {
				allocated += b.size
				blocks = append(blocks, held{siteKey{stack: b.stack, device: d.index, stream: sp.stream}, b.size})
			}
		}
		if pos < sp.end() {
			gap := sp.end() - pos
			c.FreeBytes += gap
			c.LargestFreeBlockBytes = max(c.LargestFreeBlockBytes, gap)
		}
		lay.Blocks = layBlocks[first:len(layBlocks):len(layBlocks)] // never nil: JSON [] for no blocks
		c.Layout = append(c.Layout, lay)
		if allocated == 0 {
			continue
		}
		c.PinnedSegments++
		stranded := sub(sp.size, allocated)
		c.StrandedBytes += stranded
		// Divide the stranded bytes among the live blocks in proportion
		// to their sizes; the remainder of the integer division goes to
		// the largest block, so the shares add up exactly.
		var given, largestSize uint64
		var largest siteKey
		for _, h := range blocks {
			s := get(h.key)
			s.Blocks++
			s.LiveBytes += h.size
			// stranded*size/allocated in 128 bits: both factors may
			// exceed 2^32; the quotient is at most stranded.
			hi, lo := bits.Mul64(stranded, h.size)
			share, _ := bits.Div64(hi, lo, allocated)
			s.StrandedBytes += share
			given += share
			if h.size > largestSize {
				largest, largestSize = h.key, h.size
			}
		}
		get(largest).StrandedBytes += stranded - given
	}
}

// unmapRange removes [lo, hi) from the sorted mapped runs, splitting the
// run that holds it.
func unmapRange(runs []span, lo, hi uint64) []span {
	out := runs[:0:0]
	for _, r := range runs {
		if r.end() <= lo || r.addr >= hi {
			out = append(out, r)
			continue
		}
		if r.addr < lo {
			out = append(out, span{addr: r.addr, size: lo - r.addr, stream: r.stream, expandable: true})
		}
		if r.end() > hi {
			out = append(out, span{addr: hi, size: r.end() - hi, stream: r.stream, expandable: true})
		}
	}
	return out
}

// mapRange adds a range to the mapped runs, joining the runs it touches.
func mapRange(runs []span, s span) []span {
	lo, hi := s.addr, s.end()
	out := runs[:0:0]
	for _, r := range runs {
		if r.end() < lo || r.addr > hi {
			out = append(out, r)
			continue
		}
		lo, hi = min(lo, r.addr), max(hi, r.end())
		s.stream = r.stream
	}
	out = append(out, span{addr: lo, size: hi - lo, stream: s.stream, expandable: true})
	slices.SortFunc(out, bySpanAddress)
	return out
}

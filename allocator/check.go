package allocator

import (
	"fmt"
	"sort"
)

// CheckInvariants verifies the allocator's internal consistency and returns
// the first violation found:
//
//   - the blocks of every segment tile it exactly, linked both ways, and no
//     two segments overlap;
//   - expandable blocks agree with the page table (mapped blocks lie on
//     mapped pages, unmapped blocks are whole unmapped pages);
//   - each pool's free set holds exactly its free, idle, mapped blocks and
//     its unmapped set exactly its unmapped ones; no two neighbours that
//     could merge are left apart;
//   - every statistic's current value equals a recomputation from the
//     blocks, peaks are not below current values, allocated - freed equals
//     current, and the bytes held from the device equal reserved_bytes.
//
// WithInvariantChecks runs it after every operation.
func (a *Allocator) CheckInvariants() error {
	if a.lock() {
		defer a.mu.Unlock()
	}
	return a.checkInvariants()
}

func (a *Allocator) checkInvariants() error {
	var want Stats
	freeCount := map[*pool]int{}
	unmappedCount := map[*pool]int{}
	events := 0
	segs := append([]*segment(nil), a.segments...)
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	for i, seg := range segs {
		if seg.index < 0 || seg.index >= len(a.segments) || a.segments[seg.index] != seg {
			return fmt.Errorf("segment %#x: stale index %d", seg.base, seg.index)
		}
		if i > 0 && segs[i-1].base+segs[i-1].size > seg.base {
			return fmt.Errorf("segments %#x and %#x overlap", segs[i-1].base, seg.base)
		}
		if err := a.checkSegment(seg, &want, freeCount, unmappedCount, &events); err != nil {
			return err
		}
	}
	for _, p := range a.pools {
		if p.free.len() != freeCount[p] {
			return fmt.Errorf("%s pool: free set holds %d blocks, segments have %d free blocks",
				poolNames[p.statIdx], p.free.len(), freeCount[p])
		}
		if len(p.unmapped.blocks) != unmappedCount[p] {
			return fmt.Errorf("%s pool: unmapped set holds %d blocks, segments have %d",
				poolNames[p.statIdx], len(p.unmapped.blocks), unmappedCount[p])
		}
		if err := p.free.check(); err != nil {
			return fmt.Errorf("%s pool: %v", poolNames[p.statIdx], err)
		}
	}
	if a.plan != nil {
		if err := a.checkPlan(freeCount); err != nil {
			return err
		}
	}
	if events != a.pendingEvents {
		return fmt.Errorf("blocks wait for %d events, queues hold %d", events, a.pendingEvents)
	}
	return a.checkStats(&want)
}

func (a *Allocator) checkSegment(seg *segment, want *Stats, freeCount, unmappedCount map[*pool]int, events *int) error {
	p := seg.pool
	pi := p.statIdx
	b := seg.head
	if b == nil || b.prev != nil || b.addr != seg.base {
		return fmt.Errorf("segment %#x: head block does not start it", seg.base)
	}
	blocks := 0
	for end := seg.base; b != nil; b = b.next {
		switch {
		case b.seg != seg || b.pool != p || b.stream != seg.stream:
			return fmt.Errorf("block %#x: wrong segment, pool or stream", b.addr)
		case b.exp != (seg.exp != nil):
			return fmt.Errorf("block %#x: marked expandable %v, its segment %v", b.addr, b.exp, seg.exp != nil)
		case b.addr != end:
			return fmt.Errorf("block %#x: expected at %#x (gap or overlap)", b.addr, end)
		case b.size == 0 || b.size%MinBlockSize != 0:
			return fmt.Errorf("block %#x: size %d is not a positive multiple of %d", b.addr, b.size, MinBlockSize)
		case b.next != nil && b.next.prev != b:
			return fmt.Errorf("block %#x: next's prev link is broken", b.addr)
		case b.next == nil && b.addr+b.size != seg.base+seg.size:
			return fmt.Errorf("segment %#x: blocks end at %#x, segment at %#x", seg.base, b.addr+b.size, seg.base+seg.size)
		case b.next != nil && b.allocatable() && b.next.allocatable() && b.mapped == b.next.mapped:
			return fmt.Errorf("blocks %#x and %#x are free neighbours left unmerged", b.addr, b.next.addr)
		case !b.mapped && seg.exp == nil:
			return fmt.Errorf("block %#x: unmapped block in a cudaMalloc segment", b.addr)
		case !b.mapped && (b.allocated || b.eventCount > 0):
			return fmt.Errorf("block %#x: unmapped block in use", b.addr)
		case b.streamUses != nil && (!b.allocated || len(*b.streamUses) == 0):
			// active() relies on it: a block's uses of other streams are
			// kept only while it is allocated (free turns them into events).
			return fmt.Errorf("block %#x: %d uses of other streams kept, allocated %v", b.addr, len(*b.streamUses), b.allocated)
		}
		end = b.addr + b.size
		blocks++
		if seg.exp != nil {
			if err := checkPages(seg, b); err != nil {
				return err
			}
		}
		*events += int(b.eventCount)
		inFree := p.free.contains(b)
		if !b.mapped {
			unmappedCount[p]++
			if !p.unmapped.contains(b) || inFree {
				return fmt.Errorf("block %#x: unmapped but not (only) in the unmapped set", b.addr)
			}
			continue
		}
		if b.allocatable() != inFree {
			return fmt.Errorf("block %#x: free=%v but in free set=%v", b.addr, b.allocatable(), inFree)
		}
		if inFree {
			freeCount[p]++
		}
		if b.lentTo != nil {
			// A page is reserved where it was created; the stitched range
			// that maps it again counts it as allocated.
			if !b.allocated || seg.exp == nil || b.lentTo.stitch == nil || a.segments[b.lentTo.index] != b.lentTo {
				return fmt.Errorf("block %#x: lent, but not an allocated expandable block of a live stitched range", b.addr)
			}
			want.ReservedBytes.increase(pi, int64(b.size))
			continue
		}
		if seg.stitch == nil {
			want.ReservedBytes.increase(pi, int64(b.size))
		}
		active := b.active()
		if b.allocated {
			want.Allocation.increase(pi, 1)
			want.AllocatedBytes.increase(pi, int64(b.size))
			if b.size >= a.cfg.MaxSplitSize {
				want.OversizeAllocations.increase(1)
			}
		}
		if active {
			want.Active.increase(pi, 1)
			want.ActiveBytes.increase(pi, int64(b.size))
			want.RequestedBytes.increase(pi, int64(b.requested))
		} else if seg.exp == nil && b.isSplit() {
			want.InactiveSplit.increase(pi, 1)
			want.InactiveSplitBytes.increase(pi, int64(b.size))
		}
	}
	if seg.stitch != nil {
		if a.stitch == nil { // freeBlock looks for stitched segments only under Stitch
			return fmt.Errorf("segment %#x: stitched, but the policy does not stitch", seg.base)
		}
		return checkStitched(seg, want)
	}
	if seg.exp == nil {
		want.Segment.increase(pi, 1)
		if seg.size >= a.cfg.MaxSplitSize {
			want.OversizeSegments.increase(1)
		}
	}
	return nil
}

// checkStitched: a stitched range holds one active block, and its lent
// blocks add up to it and name it.
func checkStitched(seg *segment, want *Stats) error {
	b := seg.head
	if b.next != nil || !b.active() {
		return fmt.Errorf("stitched range %#x: not one active block", seg.base)
	}
	var sum uint64
	for _, l := range seg.stitch.lent {
		if l.lentTo != seg {
			return fmt.Errorf("stitched range %#x: lent block %#x names another range", seg.base, l.addr)
		}
		sum += l.size
	}
	if sum != seg.size {
		return fmt.Errorf("stitched range %#x of %d bytes maps %d bytes of lent blocks", seg.base, seg.size, sum)
	}
	want.StitchedBytes.increase(int64(seg.size))
	return nil
}

func checkPages(seg *segment, b *Block) error {
	page := seg.exp.pageSize
	first := (b.addr - seg.base) / page
	last := (b.addr + b.size - 1 - seg.base) / page
	if !b.mapped && ((b.addr-seg.base)%page != 0 || b.size%page != 0) {
		return fmt.Errorf("block %#x: unmapped range is not whole pages", b.addr)
	}
	for i := first; i <= last; i++ {
		if seg.exp.mapped[i] != b.mapped {
			return fmt.Errorf("block %#x: mapped=%v but page %d mapped=%v", b.addr, b.mapped, i, seg.exp.mapped[i])
		}
	}
	return nil
}

func (a *Allocator) checkStats(want *Stats) error {
	got := &a.stats
	wantArrays := want.Arrays()
	for k, ar := range got.Arrays() {
		for i := range ar.Array {
			if err := checkStat(ar.Name+"."+poolNames[i], ar.Array[i], wantArrays[k].Array[i].Current, a.accumulatedReset); err != nil {
				return err
			}
		}
	}
	if !a.oversizeDrift {
		wantSingles := want.Singles()
		for k, st := range got.Singles() {
			if err := checkStat(st.Name, *st.Stat, wantSingles[k].Stat.Current, a.accumulatedReset); err != nil {
				return err
			}
		}
	}
	if err := checkStat("stitched_bytes", got.StitchedBytes, want.StitchedBytes.Current, a.accumulatedReset); err != nil {
		return err
	}
	if r := uint64(got.ReservedBytes[StatAll].Current); r != a.totalAllocated {
		return fmt.Errorf("reserved_bytes %d but %d bytes held from the device", r, a.totalAllocated)
	}
	if a.totalAllocated > a.deviceTotal {
		return fmt.Errorf("%d bytes reserved on a device of %d", a.totalAllocated, a.deviceTotal)
	}
	return nil
}

// checkStat compares one statistic with its recomputation; reset says the
// accumulated totals were zeroed, after which they no longer add up to the
// current value.
func checkStat(name string, s Stat, want int64, reset bool) error {
	switch {
	case s.Current != want:
		return fmt.Errorf("%s.current = %d, blocks say %d", name, s.Current, want)
	case s.Peak < s.Current:
		return fmt.Errorf("%s.peak %d below current %d", name, s.Peak, s.Current)
	case s.Allocated-s.Freed != s.Current && !reset:
		return fmt.Errorf("%s: allocated %d - freed %d != current %d", name, s.Allocated, s.Freed, s.Current)
	}
	return nil
}

// check verifies the free set's own structure: the index's leaves sorted
// and summarised by their first keys, every bucket in it live, under its
// own key, knowing its place, marked non-empty exactly when it holds
// blocks, and holding blocks of its key in descending address order that
// name it; the hot blocks each once and in no bucket; the counts of
// blocks and bytes (in buckets), empty buckets and sizes.
func (s *freeSet) check() error {
	n, keys, empty := 0, 0, 0
	var bytes uint64
	sizes, refs := map[uint64]int{}, map[uint64]int{}
	var prev bkey
	x := &s.idx
	if len(x.firsts) != len(x.leaves) {
		return fmt.Errorf("index: %d first keys for %d leaves", len(x.firsts), len(x.leaves))
	}
	for li, l := range x.leaves {
		if l.n <= 0 || l.n > leafCap || x.firsts[li] != l.keys[0] {
			return fmt.Errorf("index leaf %d: %d keys, first key %v, recorded %v", li, l.n, l.keys[0], x.firsts[li])
		}
		if (li > 0 && l.prev != x.leaves[li-1]) || (li == 0 && l.prev != nil) ||
			(li+1 < len(x.leaves) && l.next != x.leaves[li+1]) || (li+1 == len(x.leaves) && l.next != nil) {
			return fmt.Errorf("index leaf %d: links to its neighbours broken", li)
		}
		if l.n < leafCap && l.full>>uint(l.n) != 0 {
			return fmt.Errorf("index leaf %d: non-empty marks past its %d keys", li, l.n)
		}
		for i, bk := range l.vals[:l.n] {
			k := l.keys[i]
			if keys > 0 && !prev.less(k) {
				return fmt.Errorf("index: key %v after %v", k, prev)
			}
			prev = k
			keys++
			if bk == nil || bk.key != k || !bk.live || bk.leaf != l || int(bk.slot) != i {
				return fmt.Errorf("index: key %v names a bucket that is not its own, live and in its place", k)
			}
			if s.tab.get(k) != bk {
				return fmt.Errorf("bucket %v: the table does not find it", k)
			}
			if full := l.full&(1<<uint(i)) != 0; full != (len(bk.blocks) > 0) {
				return fmt.Errorf("bucket %v: marked non-empty %v, holds %d blocks", k, full, len(bk.blocks))
			}
			if bk.sz == nil || bk.sz != s.sizes.nodes.get(k.size) {
				return fmt.Errorf("bucket %v: not counted under its size", k)
			}
			refs[k.size]++
			if len(bk.blocks) == 0 {
				empty++
			} else {
				sizes[k.size]++
			}
			for j, e := range bk.blocks {
				b := e.b
				if e.addr != b.addr {
					return fmt.Errorf("block %#x in bucket %v under address %#x", b.addr, k, e.addr)
				}
				if b.stream != k.stream || b.size != k.size {
					return fmt.Errorf("block %#x (stream %d size %d) in bucket %v", b.addr, b.stream, b.size, k)
				}
				if j > 0 && bk.blocks[j-1].addr <= b.addr {
					return fmt.Errorf("bucket %v not in descending address order", k)
				}
				if b.bucket != bk {
					return fmt.Errorf("block %#x does not name its bucket", b.addr)
				}
				if b.older != 0 {
					return fmt.Errorf("block %#x in bucket %v says it is in older at %d", b.addr, k, b.older-1)
				}
				bytes += b.size
			}
			n += len(bk.blocks)
		}
		for i := l.n; i < leafCap; i++ {
			if l.vals[i] != nil {
				return fmt.Errorf("index leaf %d: a bucket past its %d keys", li, l.n)
			}
		}
	}
	if x.seen != nil {
		for si, set := range x.seen {
			for _, p := range set {
				if p.leaf == nil || p.ver != uint32(x.ver) {
					continue // forgotten
				}
				// A remembered place is where a search would end.
				li, i, _ := x.locate(p.k)
				if seenSet(p.k) != uint64(si) || p.leaf != x.leaves[li] || int(p.slot) != i {
					return fmt.Errorf("index: the place remembered for %v in set %d is not where its search ends", p.k, si)
				}
			}
		}
	}
	if s.nolder < 0 || s.nolder > olderCap || s.cold && (s.hot != nil || s.nolder > 0) {
		return fmt.Errorf("%d older hot blocks, newest %v (cold %v)", s.nolder, s.hot, s.cold)
	}
	if s.ohead < 0 || s.ohead >= olderRing {
		return fmt.Errorf("older's ring starts at %d", s.ohead)
	}
	if h := s.hot; h != nil && h.older != 0 {
		return fmt.Errorf("the newest hot block %#x says it is in older at %d", h.addr, h.older-1)
	}
	hot := []*Block{s.hot}
	for i, h := range s.older {
		// The ring holds nolder blocks from ohead on, and nothing else.
		if in := (i-s.ohead)&olderMask < s.nolder; (h == nil) == in {
			return fmt.Errorf("older ring place %d (from %d, %d blocks): block %v", i, s.ohead, s.nolder, h)
		}
		if h != nil && int(h.older) != i+1 {
			return fmt.Errorf("hot block %#x in older ring place %d says it is at %d", h.addr, i, int(h.older)-1)
		}
	}
	for i := range s.nolder {
		hot = append(hot, s.olderAt(i))
	}
	for i, h := range hot {
		if h == nil {
			continue
		}
		// Held once, and in no bucket: its own bucket (if it has one)
		// must not hold it.
		if bk := s.tab.get(bkey{h.stream, h.size}); bk != nil {
			if i := search(bk.blocks, h.addr); i < len(bk.blocks) && bk.blocks[i].b == h {
				return fmt.Errorf("hot block %#x is in its bucket too", h.addr)
			}
		}
		for _, o := range hot[:i] {
			if o == h {
				return fmt.Errorf("hot block %#x held twice", h.addr)
			}
		}
	}
	if s.tab.n != keys {
		return fmt.Errorf("the table holds %d buckets, the index %d", s.tab.n, keys)
	}
	if n != s.n || keys != x.n || empty != s.empty {
		return fmt.Errorf("counts: %d blocks (recorded %d), %d buckets (recorded %d), %d empty (recorded %d)",
			n, s.n, keys, x.n, empty, s.empty)
	}
	if bytes != s.bytes {
		return fmt.Errorf("free bytes %d, recorded %d", bytes, s.bytes)
	}
	if s.sizes.nodes.len() != len(refs) || len(s.sizes.all) != len(refs) {
		return fmt.Errorf("%d size nodes (%d listed) for %d sizes", s.sizes.nodes.len(), len(s.sizes.all), len(refs))
	}
	for i, sn := range s.sizes.all {
		if sn.at != i || s.sizes.nodes.get(sn.size) != sn {
			return fmt.Errorf("size node %d listed at %d, or not in the index", sn.size, i)
		}
	}
	var largest uint64
	for _, sn := range s.sizes.all {
		size := sn.size
		if sn.refs != refs[size] || sn.full != sizes[size] {
			return fmt.Errorf("size %d: %d buckets, %d holding blocks; counted %d and %d", size, refs[size], sizes[size], sn.refs, sn.full)
		}
		if sn.full > 0 {
			largest = max(largest, size)
		}
	}
	if !s.sizes.stale && s.sizes.top != largest {
		return fmt.Errorf("largest free size %d, recorded %d", largest, s.sizes.top)
	}
	for _, bk := range s.spare {
		if bk.live {
			return fmt.Errorf("bucket %v is both spare and live", bk.key)
		}
	}
	return nil
}

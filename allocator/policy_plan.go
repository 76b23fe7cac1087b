package allocator

import (
	"errors"
	"strconv"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/allocator/placement"
)

// The plan policy: a training step's blocks at offsets solved offline.
//
// A training step asks for the same blocks in the same order every time,
// and an online allocator, which decides each request without knowing when
// the blocks around it will be freed, strands bytes between them. Once the
// lifetimes of one step are known, where to put its blocks is the offline
// placement problem (allocator/placement, minimalloc's): blocks that are
// alive together get disjoint ranges, and the peak address is close to the
// largest sum of bytes alive at one time. STAlloc (EuroSys'26) plans a
// step that way from a profiled run; the plan policy learns it online,
// from the requests the allocator has seen so far, so that a replay never
// peeks at the future and the plug-in can run it inside PyTorch.
//
// Observing. Until a plan is made, every request is served by the online
// allocator (the stitch engine on a device with virtual memory, else
// PyTorch's) and logged: its rounded size, its stream, the clock (one tick
// per malloc or free) at which it was handed out and at which it was
// freed. Blocks are tagged with their log entry; a log that fills (no step
// found) starts over, so that memory stays bounded.
//
// Steps. The allocator sees no step markers; a step is found in the
// allocated bytes as a zigzag from a trough to a peak and back, like the
// lifetime policy's but with looser thresholds (a fall by half the rise
// since the base is a trough, a rise by a quarter of that fall starts the
// next step; the base follows the bytes down), and a boundary is the
// lowest point of each trough: there the step's own blocks are gone. The
// troughs between the layers of a forward pass are boundaries too; they
// climb, while a training step ends at the height it began, so only
// boundaries at the same level (within 1/16 of the swing) may enclose a
// step. A step repeats when it asks for the same sequence of rounded
// sizes on the same streams as the one before it.
//
// Planning. When the newest boundary closes a step that repeats the one
// before it (the longest such step in the log: a whole step holds longer
// than one layer) and the requests of the step in progress so far match
// it too, the policy solves the
// placement of the last step's blocks that were handed out and freed
// inside it (on the stream with the largest of them), with the placement
// heuristics only (a dozen greedy orders, no branch and bound: a malloc
// must not stall on a search), and records, for each position of the
// step, the size and stream expected there and the offset planned for it.
// Blocks that outlive their step (weights, optimizer state, gradients
// kept for the next step) are not planned: they stay with the online
// allocator.
//
// The arena. At the next step boundary (the position counter wraps to the
// step's first request), the policy returns the online allocator's cached
// free memory to the device and reserves the plan's peak, rounded up to
// 2 MiB, as one cudaMalloc segment: the arena. From then on a request at a
// planned position is carved out of the arena at its planned offset, if
// the bytes there are free; it is an ordinary block of an ordinary segment
// (split off its free neighbours, merged back with them when freed), so
// the statistics, snapshots and invariant checks see it as any block. The
// arena is not in the pools that best fit or empty_cache walk: nothing but
// the plan puts a block there, and it stays reserved while the plan holds.
//
// Never wrong. A request whose rounded size or stream differs from the one
// expected at its position means the program changed (an evaluation pass,
// another batch shape): the plan is abandoned, observation starts over,
// and the arena becomes an ordinary segment of the large pool: blocks
// already placed stay valid, its free bytes serve online requests, and it
// goes back to the device as soon as it is wholly free. No new arena is
// reserved while it is held. A planned block
// whose bytes are still taken (a block of the step lived longer this time)
// is served online instead; the plan holds. Requests the plan did not
// foresee (unplanned positions, other streams, no arena) go online.
//
// Costs. Device calls: once per plan, an empty_cache of the online pools
// and one cudaMalloc of the arena (one cudaFree once an abandoned arena
// empties).
// Time: observing appends a log entry per malloc and updates it per free;
// planning runs the heuristics once, O(n²) in the step's n blocks
// (milliseconds for a thousand, about a second for seven thousand); a
// planned malloc compares the expected size and walks the arena's blocks
// to the planned offset. Memory: the log (40 bytes per request, at most
// maxPlanLog) and one slot (32 bytes) per position of the step.
//
// The code uses the same words: planState.observe logs, track finds the
// boundaries, level compares them, tryPlan matches steps, makePlan
// solves, makeArena reserves, placePlanned carves a planned block,
// abandon gives the plan up and releaseFormer returns its arena.

// Plan serves a training step's blocks from a solved placement. Sizes are
// PyTorch's.
type Plan struct{ PyTorch }

// Name implements Policy.
func (Plan) Name() string { return "plan" }

func (Plan) engine(a *Allocator, cfg *config.Config) error {
	if a.vm != nil {
		if err := (Stitch{}).engine(a, cfg); err != nil {
			return err
		}
	}
	a.plan = &planState{arena: pool{statIdx: StatLarge, free: a.newFreeSet()}, gen: 1, steps: planSteps}
	a.stats.Planning = true
	return nil
}

// maxPlanLog bounds the requests logged: a full log keeps the last three
// steps found (the most tryPlan reads), or starts over.
const maxPlanLog = 1 << 15

type planReq struct {
	size   uint64
	stream Stream
	t, end int64 // clock when handed out and when freed (-1: live)
}

// planSlot is one position of the planned step.
type planSlot struct {
	size    uint64
	stream  Stream
	off     uint64
	planned bool
}

type planBound struct {
	idx       int   // the first request of the step
	clock     int64 // the clock at the boundary
	lo, swing int64 // the allocated bytes there, and the swing down to them
}

// level says whether two boundaries are at the same height: a training
// step ends where it began, while the troughs between the layers of a
// forward pass climb by the activations each layer keeps.
func level(x, y planBound) bool {
	d := x.lo - y.lo
	if d < 0 {
		d = -d
	}
	return d <= max(x.swing, y.swing)/16
}

type planState struct {
	arena  pool     // the arena's pool: not in Allocator.pools
	seg    *segment // the arena, nil when none is reserved
	former *segment // an abandoned plan's arena, until it is released

	clock int64
	gen   uint32 // blocks tagged with another generation are not in the log
	reqs  []planReq
	first int // the log index of reqs[0]: older entries were dropped

	// the step boundaries (policy_lifetime.go's zigzag, looser)
	steps   stepDetector
	loIdx   int
	loClock int64
	bounds  []planBound

	slots []planSlot // the plan, nil while observing
	peak  uint64
	pos   int // the position of the next request in the step
}

// planMalloc is malloc under the plan policy.
func (a *Allocator) planMalloc(origSize, size uint64, stream Stream) (*Block, error) {
	ps := a.plan
	ps.clock++
	if ps.slots != nil {
		s := &ps.slots[ps.pos]
		if s.size != size || s.stream != stream {
			ps.abandon(a)
		} else if ps.pos == 0 && ps.seg == nil {
			if err := ps.makeArena(a); err != nil {
				return nil, a.fail(err)
			}
		}
		if ps.slots != nil { // still: neither abandoned nor short of memory
			ps.pos++
			if ps.pos == len(ps.slots) {
				ps.pos = 0
			}
			if s.planned && ps.seg != nil {
				if b := a.placePlanned(s, origSize); b != nil {
					a.stats.NumPlannedAllocs++
					return b, nil
				}
				a.stats.NumPlanMisses++
			}
			return a.mallocRounded(origSize, size, stream)
		}
	}
	b, err := a.mallocRounded(origSize, size, stream)
	if err != nil {
		return nil, err
	}
	ps.observe(a, b, size, stream)
	return b, nil
}

// observe logs a request served online while no plan is made.
func (ps *planState) observe(a *Allocator, b *Block, size uint64, stream Stream) {
	if len(ps.reqs) == maxPlanLog {
		ps.slide()
	}
	b.planGen, b.planIdx = ps.gen, int32(ps.first+len(ps.reqs))
	ps.reqs = append(ps.reqs, planReq{size: size, stream: stream, t: ps.clock, end: -1})
	ps.track(a, a.stats.AllocatedBytes[StatAll].Current, false)
}

// planFreed logs a free; allocated bytes have already dropped.
func (a *Allocator) planFreed(b *Block) {
	ps := a.plan
	ps.clock++
	if ps.slots != nil {
		return
	}
	if i := int(b.planIdx) - ps.first; b.planGen == ps.gen && i >= 0 && i < len(ps.reqs) {
		ps.reqs[i].end = ps.clock
	}
	ps.track(a, a.stats.AllocatedBytes[StatAll].Current, true)
}

// slide drops the log's entries before the first step boundary in its
// last two thirds, or restarts when there is none; a log index stays a
// block's tag.
func (ps *planState) slide() {
	j := 0
	for j < len(ps.bounds) && ps.bounds[j].idx < len(ps.reqs)/3 {
		j++
	}
	if j == len(ps.bounds) || ps.first > 1<<30 {
		ps.restart()
		return
	}
	keep := ps.bounds[j:]
	k := keep[0].idx
	ps.reqs = ps.reqs[:copy(ps.reqs, ps.reqs[k:])]
	ps.first += k
	ps.bounds = ps.bounds[:copy(ps.bounds, keep)]
	for i := range ps.bounds {
		ps.bounds[i].idx -= k
	}
	if ps.steps.low {
		ps.loIdx = max(ps.loIdx-k, 0)
	}
}

// restart forgets the log: blocks tagged before are no longer in it.
func (ps *planState) restart() {
	ps.gen++
	ps.first = 0
	ps.reqs = ps.reqs[:0]
	ps.bounds = ps.bounds[:0]
	ps.steps.started, ps.steps.low = false, false
}

// planSteps is the plan policy's step detector. Unlike the lifetime
// policy's, the base follows the bytes down before a trough (a program
// whose first free comes at its first peak would otherwise keep a base
// that no step falls back to), a fall to within half the swing is a
// trough, and a rise by a quarter of the fall to the trough's lowest point
// starts the next step (the first step's fall includes the optimizer state
// allocated at its end, so a later step may rise by less than half of it).
var planSteps = stepDetector{troughDiv: 2, riseDiv: 4, followBase: true, riseFromLo: true}

// track follows the allocated bytes cur and records a step boundary at
// the lowest point of each trough, once the next step has risen from it.
func (ps *planState) track(a *Allocator, cur int64, free bool) {
	switch ps.steps.track(cur, free) {
	case stepTrough, stepLower:
		ps.loIdx, ps.loClock = len(ps.reqs), ps.clock
	case stepRise:
		d := &ps.steps
		ps.bounds = append(ps.bounds, planBound{idx: ps.loIdx, clock: ps.loClock, lo: d.base, swing: d.fall})
		ps.tryPlan(a)
	}
}

// tryPlan makes a plan when the newest boundary closes a step that
// repeats the one before it (boundaries b0, b1, b2 at the same level, the
// requests of [b0, b1) and [b1, b2) the same) and the step in progress has
// so far asked for the same requests too. The longest such step in the
// log wins: the troughs inside a step may repeat too (one per layer), and
// a plan of a whole step holds longer than a plan of one layer.
func (ps *planState) tryPlan(a *Allocator) {
	n := len(ps.bounds)
	if n < 3 {
		return
	}
	b2 := ps.bounds[n-1]
	cur := ps.reqs[b2.idx:]
	same := func(x, y []planReq) bool {
		for i := range x {
			if x[i].size != y[i].size || x[i].stream != y[i].stream {
				return false
			}
		}
		return true
	}
	for j := 1; j < n-1; j++ {
		b1 := ps.bounds[j]
		l := b2.idx - b1.idx
		if l <= len(cur) || !level(b1, b2) {
			continue
		}
		for i := j - 1; i >= 0 && ps.bounds[i].idx >= b1.idx-l; i-- {
			b0 := ps.bounds[i]
			if b0.idx != b1.idx-l || !level(b0, b1) {
				continue
			}
			step := ps.reqs[b1.idx:b2.idx]
			if same(ps.reqs[b0.idx:b1.idx], step) && same(cur, step[:len(cur)]) {
				ps.makePlan(a, step, b2.clock, len(cur))
				return
			}
		}
	}
}

// makePlan solves the placement of step's blocks born and freed before
// end and starts serving the step at position at.
func (ps *planState) makePlan(a *Allocator, step []planReq, end int64, at int) {
	// The arena's stream: the one with the most bytes of blocks born and
	// freed inside the step.
	inStep := func(r *planReq) bool { return r.end >= 0 && r.end <= end }
	bytes := map[Stream]uint64{}
	var main Stream
	for i := range step {
		if r := &step[i]; inStep(r) {
			bytes[r.stream] += r.size
			if bytes[r.stream] > bytes[main] {
				main = r.stream
			}
		}
	}
	var bufs []placement.Buffer
	var pos []int
	for i := range step {
		if r := &step[i]; inStep(r) && r.stream == main {
			bufs = append(bufs, placement.Buffer{ID: strconv.Itoa(i), Lower: r.t, Upper: r.end, Size: r.size, Alignment: MinBlockSize})
			pos = append(pos, i)
		}
	}
	if len(bufs) == 0 {
		return
	}
	sol, err := placement.Solve(bufs, placement.Options{NodeLimit: -1})
	if err != nil {
		return
	}
	slots := make([]planSlot, len(step))
	for i := range step {
		slots[i] = planSlot{size: step[i].size, stream: step[i].stream}
	}
	for j, i := range pos {
		slots[i].off, slots[i].planned = sol.Offsets[j], true
	}
	ps.slots, ps.peak, ps.pos = slots, sol.Peak, at
	a.stats.NumPlans++
	ps.restart()
}

// makeArena reserves the plan's arena at a step boundary, after returning
// the online pools' cached memory. Without memory for it the plan is
// abandoned.
func (ps *planState) makeArena(a *Allocator) error {
	if f := ps.former; f != nil {
		if f.index < len(a.segments) && a.segments[f.index] == f {
			return nil // not beside the former arena: next step, perhaps
		}
		ps.former = nil
	}
	if err := a.releaseCachedBlocks(); err != nil {
		return err
	}
	size := (ps.peak + RoundLarge - 1) / RoundLarge * RoundLarge
	if a.setFraction && a.totalAllocated+size > a.allowedMax {
		ps.abandon(a)
		return nil
	}
	addr, err := a.dev.Malloc(size)
	if err != nil {
		if errors.Is(err, ErrDeviceOutOfMemory) {
			ps.abandon(a)
			return nil
		}
		return err
	}
	p := &ps.arena
	stream := ps.slots[0].stream
	for i := range ps.slots {
		if ps.slots[i].planned {
			stream = ps.slots[i].stream
			break
		}
	}
	a.totalAllocated += size
	seg := a.newSegment(segment{base: addr, size: size, stream: stream, pool: p})
	a.addSegment(seg)
	b := a.newBlock(addr, size, stream, p, seg)
	seg.head = b
	a.stats.Segment.increase(p.statIdx, 1)
	a.stats.ReservedBytes.increase(p.statIdx, int64(size))
	if size >= a.cfg.MaxSplitSize {
		a.stats.OversizeSegments.increase(1)
	}
	a.stats.NumDeviceAlloc++
	a.record(ActionSegmentAlloc, addr, size, stream)
	insertFree(b)
	ps.seg = seg
	return nil
}

// placePlanned carves the block of slot s out of the arena at its planned
// offset, or returns nil when those bytes are not free.
func (a *Allocator) placePlanned(s *planSlot, origSize uint64) *Block {
	ps := a.plan
	seg := ps.seg
	if s.off+s.size > seg.size {
		return nil
	}
	addr := seg.base + s.off
	f := seg.head
	for f != nil && f.addr+f.size <= addr {
		f = f.next
	}
	if f == nil || !f.allocatable() || f.addr+f.size < addr+s.size {
		return nil
	}
	p := &ps.arena
	pi := p.statIdx
	p.free.remove(f)
	if f.addr < addr {
		// Split off the free bytes below the offset; both halves are now
		// inactive split blocks, as allocFoundBlock expects of f.
		if f.isSplit() {
			a.stats.InactiveSplit.increase(pi, 1)
		} else {
			a.stats.InactiveSplit.increase(pi, 2)
			a.stats.InactiveSplitBytes.increase(pi, int64(f.size))
		}
		front := a.newBlock(f.addr, addr-f.addr, f.stream, p, seg)
		splice(front, f.prev, f)
		f.size -= front.size
		f.addr = addr
		insertFree(front)
	}
	pp := params{size: s.size, allocSize: s.size, stream: s.stream, pool: p}
	return a.allocFoundBlock(&pp, f, origSize, f.size > s.size)
}

// abandon gives the plan up: observation starts over, and the arena
// becomes an ordinary segment of the large pool, blocks and free bytes
// alike (both pools count their bytes under the large pool's statistics,
// so none of them moves): the online allocator serves requests from its
// free bytes, and it goes back to the device as soon as it is wholly free
// (releaseFormer), since the stitch engine cannot lend its pages. No new
// arena is reserved while it is held.
func (ps *planState) abandon(a *Allocator) {
	ps.slots = nil
	a.stats.NumPlansAbandoned++
	ps.restart()
	seg := ps.seg
	if seg == nil {
		return
	}
	ps.seg, ps.former = nil, seg
	seg.pool = &a.large
	for b := seg.head; b != nil; b = b.next {
		inFree := b.allocatable() // the free set holds exactly these
		if inFree {
			ps.arena.free.remove(b)
		}
		b.pool = &a.large
		b.bucket = nil // a hint into the arena's free set, for live blocks too
		if inFree {
			insertFree(b)
		}
	}
}

// releaseFormer returns the former arena once the free block b is all of
// it.
func (ps *planState) releaseFormer(a *Allocator, b *Block) error {
	if b.isSplit() {
		return nil
	}
	ps.former = nil
	return a.releaseBlock(b)
}

// checkPlan: the arena's pool holds exactly the arena's free blocks (the
// segments' walk counted them), the arena is a live segment, and no other
// segment is in its pool.
func (a *Allocator) checkPlan(freeCount map[*pool]int) error {
	ps := a.plan
	if ps.arena.free.len() != freeCount[&ps.arena] {
		return errors.New("plan arena: free set and segments disagree")
	}
	if err := ps.arena.free.check(); err != nil {
		return err
	}
	for _, s := range a.segments {
		if s.pool == &ps.arena && s != ps.seg {
			return errors.New("plan arena: a segment of the arena's pool is not the arena")
		}
	}
	if ps.seg != nil && (ps.seg.index >= len(a.segments) || a.segments[ps.seg.index] != ps.seg) {
		return errors.New("plan arena: not a live segment")
	}
	if ps.slots != nil && ps.pos >= len(ps.slots) {
		return errors.New("plan: position past the step")
	}
	return nil
}

// PlanStats says what the plan policy did.
type PlanStats struct {
	Plans     int    // plans made
	Abandoned int    // plans given up because a request did not match
	Served    int    // requests served at their planned offset
	Missed    int    // planned requests whose bytes were taken, served online
	Arena     uint64 // bytes of the arena reserved now (0: none)
	Step      int    // requests in the planned step (0: no plan)
}

// PlanStats reports the plan policy's counters; ok is false under another
// policy.
func (a *Allocator) PlanStats() (s PlanStats, ok bool) {
	if a.lock() {
		defer a.mu.Unlock()
	}
	ps := a.plan
	if ps == nil {
		return s, false
	}
	st := &a.stats
	s = PlanStats{Plans: int(st.NumPlans), Abandoned: int(st.NumPlansAbandoned), Served: int(st.NumPlannedAllocs),
		Missed: int(st.NumPlanMisses), Step: len(ps.slots)}
	if ps.seg != nil {
		s.Arena = ps.seg.size
	}
	return s, true
}

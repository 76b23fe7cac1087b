package placement

import (
	"math"
	"slices"
	"time"
)

// solver holds the budget shared by every search of one Solve.
type solver struct {
	nodeLimit int64
	nodes     int64
	deadline  time.Time
	out       bool // the budget is spent
}

// tick counts a node and says whether the budget is spent.
func (s *solver) tick() bool {
	if s.out {
		return true
	}
	s.nodes++
	if s.nodes > s.nodeLimit || (!s.deadline.IsZero() && s.nodes%1024 == 0 && time.Now().After(s.deadline)) {
		s.out = true
	}
	return s.out
}

// improve searches for placements under lower capacities than the
// heuristics' peak, in three steps:
//
//  1. a few dives under peak-1: minimalloc's skyline placement, often
//     lower than greedy's;
//  2. the bound itself, with a quarter of the nodes and of the time left:
//     on an easy problem this proves optimality at once;
//  3. down from the incumbent: a search under peak-1 either finds a lower
//     placement (the new incumbent), or exhausts, which proves the peak
//     optimal, or runs out of budget, which ends the work.
//
// floor is a bound already proven for the whole problem: the partition
// need not get below it. It returns the best offsets, their peak and the
// bound proven.
func (s *solver) improve(in *instance, offs []uint64, peak, floor uint64) ([]uint64, uint64, uint64) {
	lo := max(in.liveBound(), floor)
	if s.nodeLimit <= 0 {
		return offs, peak, lo
	}
	try := func(capacity uint64, nodes int64, share time.Duration) status {
		res, st := s.roundRobin(in, capacity, nodes, share)
		if st == found {
			offs, peak = res, 0
			for j, o := range res {
				peak = max(peak, o+in.size[j])
			}
		}
		return st
	}
	left := func() int64 { return s.nodeLimit - s.nodes }
	quarter := time.Duration(0)
	if !s.deadline.IsZero() {
		quarter = time.Until(s.deadline) / 4
	}
	n := int64(len(in.size))
	if lo < peak && try(peak-1, min(4*n*int64(len(in.ranks)), left()), quarter) == exhausted {
		return offs, peak, peak
	}
	if lo < peak {
		switch try(lo, left()/4, quarter) {
		case found:
			return offs, peak, lo
		case exhausted:
			lo++
		}
	}
	for lo < peak && !s.out {
		switch try(peak-1, left(), 0) {
		case exhausted:
			lo = peak
		case aborted:
			return offs, peak, lo
		}
	}
	return offs, peak, lo
}

// roundRobin searches under capacity with each preorder in turn, n nodes
// each, then 2n each, and so on (minimalloc's restarts: a preorder that
// leads the search astray costs only its share), within nodes nodes and
// share of time (0: the solver's). Any preorder's exhausted search is a
// proof: the search is complete whatever its order.
func (s *solver) roundRobin(in *instance, capacity uint64, nodes int64, share time.Duration) ([]uint64, status) {
	stop := s.nodes + nodes
	var deadline time.Time
	if share > 0 {
		deadline = time.Now().Add(share)
	}
	for per := int64(len(in.size)); ; per *= 2 {
		for _, rank := range in.ranks {
			budget := min(per, stop-s.nodes)
			if budget <= 0 || s.out || (!deadline.IsZero() && time.Now().After(deadline)) {
				return nil, aborted
			}
			sr := newSearch(in, capacity, rank)
			sr.limit, sr.deadline = s.nodes+budget, deadline
			switch sr.run(s) {
			case found:
				return slices.Clone(sr.off), found
			case exhausted:
				return nil, exhausted
			}
		}
	}
}

type status uint8

const (
	exhausted status = iota // no placement under the capacity
	found
	aborted // the budget ran out
)

// search is one depth-first search for a canonical placement under a
// capacity (the package comment says what it builds and how it prunes).
type search struct {
	in       *instance
	rank     []int32 // the preorder: ties between equal offsets
	cap      uint64
	placed   []bool
	off      []uint64
	minOff   []uint64     // lowest offset each unplaced buffer can take
	floor    []uint64     // highest top placed in each section
	sum      []uint64     // bytes still to place in each section
	log      []change     // minOff changes, undone on backtracking
	floorLog []uint64     // the floors each placed buffer covered, before it
	cands    []int        // candidate stack, one frame per depth
	stack    []stackEntry // the buffers placed, in order
	cuts     []int32      // unplaced buffers crossing each section boundary
	limit    int64        // the solver's node count at which this search stops
	deadline time.Time    // when this search stops (zero: the solver's)
}

// change is an undo record: minOff[idx] was old.
type change struct {
	idx int32
	old uint64
}

func newSearch(in *instance, capacity uint64, rank []int32) *search {
	n := len(in.size)
	s := &search{in: in, rank: rank, cap: capacity, placed: make([]bool, n), off: make([]uint64, n),
		minOff: make([]uint64, n), floor: make([]uint64, in.nsec), sum: slices.Clone(in.secSum),
		cuts: make([]int32, in.nsec+1)}
	for j := range n {
		for b := in.lo[j]; b < in.hi[j]-1; b++ {
			s.cuts[b]++
		}
	}
	return s
}

// part is a sub-problem of the search: the buffers left to place in a
// range of sections that no unplaced buffer outside it reaches.
type part struct {
	bufs   []int
	s0, s1 int32 // its sections [s0, s1)
}

// run searches the whole instance.
func (s *search) run(sv *solver) status {
	all := make([]int, len(s.in.size))
	for j := range all {
		all[j] = j
	}
	return s.solve(sv, &part{bufs: all, s0: 0, s1: int32(s.in.nsec)})
}

// solve searches one part from scratch: its canonical order starts again
// at offset 0, since its buffers conflict with nothing placed after them
// outside it.
func (s *search) solve(sv *solver, p *part) status {
	return s.dfs(sv, p, len(p.bufs), 0, -1)
}

// dfs places the left unplaced buffers of p, each at an offset at or above
// lastOff (at lastOff, later than lastRank in the preorder).
func (s *search) dfs(sv *solver, p *part, left int, lastOff uint64, lastRank int32) status {
	if left == 0 {
		return found
	}
	in := s.in
	// Dominance: nothing goes at or above the lowest top an unplaced
	// buffer could reach.
	minTop := uint64(math.MaxUint64)
	for _, u := range p.bufs {
		if !s.placed[u] {
			minTop = min(minTop, s.minOff[u]+in.size[u])
		}
	}
	base := len(s.cands)
	for _, u := range p.bufs {
		if s.placed[u] {
			continue
		}
		o := s.minOff[u]
		if o < minTop && (o > lastOff || (o == lastOff && s.rank[u] > lastRank)) && o+in.size[u] <= s.cap {
			s.cands = append(s.cands, u)
		}
	}
	for k := base; k < len(s.cands); k++ {
		// Selection rather than a sort: a dive tries the first candidate
		// only, and each one tried costs O(n) anyway.
		best := k
		for m := k + 1; m < len(s.cands); m++ {
			if s.before(s.cands[m], s.cands[best]) {
				best = m
			}
		}
		s.cands[k], s.cands[best] = s.cands[best], s.cands[k]
		// A node is one buffer tried at one offset: what costs O(n).
		if sv.tick() || sv.nodes > s.limit ||
			(!s.deadline.IsZero() && sv.nodes%1024 == 0 && time.Now().After(s.deadline)) {
			s.cands = s.cands[:base]
			return aborted
		}
		u := s.cands[k]
		depth := len(s.stack)
		o := s.minOff[u]
		cut := s.place(u, o, p)
		st := exhausted
		if s.feasible(o, p) {
			if cut {
				st = s.decompose(sv, p)
			} else {
				st = s.dfs(sv, p, left-1, o, s.rank[u])
			}
		}
		if st != exhausted {
			s.cands = s.cands[:base]
			return st
		}
		s.undo(depth)
	}
	s.cands = s.cands[:base]
	return exhausted
}

// decompose is minimalloc's dynamic decomposition: once no unplaced
// buffer crosses a section boundary inside p, the buffers on either side
// no longer interact and each side is solved alone. A side that has no
// placement makes the whole branch fail without trying the other sides'
// alternatives against it: the search multiplies no longer.
func (s *search) decompose(sv *solver, p *part) status {
	in := s.in
	start := p.s0
	for b := p.s0; b < p.s1; b++ {
		if b < p.s1-1 && s.cuts[b] > 0 {
			continue
		}
		sub := &part{s0: start, s1: b + 1}
		for _, u := range p.bufs {
			if !s.placed[u] && in.lo[u] < sub.s1 && sub.s0 < in.hi[u] {
				sub.bufs = append(sub.bufs, u)
			}
		}
		start = b + 1
		if len(sub.bufs) == 0 {
			continue
		}
		if st := s.solve(sv, sub); st != found {
			return st
		}
	}
	return found
}

// before orders the candidates: lowest offset first, then the preorder.
func (s *search) before(a, b int) bool {
	if s.minOff[a] != s.minOff[b] {
		return s.minOff[a] < s.minOff[b]
	}
	return s.rank[a] < s.rank[b]
}

// stackEntry is an undo record of the stack: buffer u placed, with the
// minOff log at mark before it.
type stackEntry struct {
	u    int
	mark int
}

// place puts u at o: the buffers it overlaps can only go above it, its
// sections' floors rise to its top, and it no longer joins the sections
// it spans. It reports whether a boundary inside p is now crossed by no
// unplaced buffer.
func (s *search) place(u int, o uint64, p *part) bool {
	in := s.in
	s.stack = append(s.stack, stackEntry{u, len(s.log)})
	s.placed[u], s.off[u] = true, o
	top := o + in.size[u]
	for v := range in.size {
		if s.placed[v] || !in.overlaps(u, v) {
			continue
		}
		if a := alignUp(top, in.align[v]); s.minOff[v] < a {
			s.log = append(s.log, change{idx: int32(v), old: s.minOff[v]})
			s.minOff[v] = a
		}
	}
	// The old floors go to their own log in one copy: a long-lived
	// buffer spans thousands of sections.
	lo, hi := in.lo[u], in.hi[u]
	s.floorLog = append(s.floorLog, s.floor[lo:hi]...)
	for sec := lo; sec < hi; sec++ {
		s.floor[sec] = top
		s.sum[sec] -= in.size[u]
	}
	cut := false
	for b := lo; b < hi-1; b++ {
		s.cuts[b]--
		if s.cuts[b] == 0 && b >= p.s0 && b < p.s1-1 {
			cut = true
		}
	}
	return cut
}

// undo takes the placements above depth off the stack, last first.
func (s *search) undo(depth int) {
	in := s.in
	for len(s.stack) > depth {
		pl := s.stack[len(s.stack)-1]
		s.stack = s.stack[:len(s.stack)-1]
		u := pl.u
		for i := len(s.log) - 1; i >= pl.mark; i-- {
			s.minOff[s.log[i].idx] = s.log[i].old
		}
		s.log = s.log[:pl.mark]
		lo, hi := in.lo[u], in.hi[u]
		k := len(s.floorLog) - int(hi-lo)
		copy(s.floor[lo:hi], s.floorLog[k:])
		s.floorLog = s.floorLog[:k]
		for sec := lo; sec < hi; sec++ {
			s.sum[sec] += in.size[u]
		}
		for b := lo; b < hi-1; b++ {
			s.cuts[b]++
		}
		s.placed[u] = false
	}
}

// feasible is section inference over p's sections: every later buffer of
// p goes at or above o (canonical order) and above its section's floor,
// so what is left to place in a section has to fit between that and the
// capacity.
func (s *search) feasible(o uint64, p *part) bool {
	for sec := p.s0; sec < p.s1; sec++ {
		if left := s.sum[sec]; left > 0 && max(s.floor[sec], o)+left > s.cap {
			return false
		}
	}
	return true
}

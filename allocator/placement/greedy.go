package placement

import (
	"cmp"
	"math/bits"
	"slices"
)

// An ordering is one preorder of the heuristics: a comparison of two
// buffers of an instance, largest key first.
type ordering func(in *instance, a, b int) int

// keys of the orders, minimalloc's letters in brackets.
func bySize(in *instance, a, b int) int { return cmp.Compare(in.size[b], in.size[a]) } // Z
func byLength(in *instance, a, b int) int {
	return cmp.Compare(in.hi[b]-in.lo[b], in.hi[a]-in.lo[a])
} // L
func byArea(in *instance, a, b int) int {
	ha, la := bits.Mul64(in.size[a], uint64(in.hi[a]-in.lo[a]))
	hb, lb := bits.Mul64(in.size[b], uint64(in.hi[b]-in.lo[b]))
	if c := cmp.Compare(hb, ha); c != 0 {
		return c
	}
	return cmp.Compare(lb, la)
}                                        // A
func byStart(in *instance, a, b int) int { return cmp.Compare(in.lo[a], in.lo[b]) } // time order

// orders are the preorders the heuristics try; each ties on the next key
// and finally on the input position, so every run is deterministic. nil
// is the busiest section first (minimalloc's T). The last three are
// minimalloc's default preorders (WAT, TAW, TWA: W its size, A area, T
// total), which on dense problems lead the search where the others do not.
var orders = [][]ordering{
	{bySize, byLength},
	{byArea, bySize},
	{byLength, bySize},
	{byStart, bySize},
	{bySize, byArea, nil},
	{nil, byArea, bySize},
	{nil, bySize, byArea},
}

// total is, per buffer, the largest sum alive in one of its sections
// (minimalloc's "total"): buffers in the tightest part of time first.
func (in *instance) total() []uint64 {
	t := make([]uint64, len(in.size))
	for j := range t {
		for s := in.lo[j]; s < in.hi[j]; s++ {
			t[j] = max(t[j], in.secSum[s])
		}
	}
	return t
}

// order returns the buffers of in sorted by keys.
func (in *instance) order(keys []ordering, total []uint64) []int {
	o := make([]int, len(in.size))
	for i := range o {
		o[i] = i
	}
	slices.SortFunc(o, func(a, b int) int {
		for _, k := range keys {
			var c int
			if k == nil {
				c = cmp.Compare(total[b], total[a])
			} else {
				c = k(in, a, b)
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	return o
}

// heuristics runs every order with first fit and best fit and returns the
// lowest peak's offsets. The orders become in.ranks, the search's
// tie-breaks, the best one first.
func (in *instance) heuristics() ([]uint64, uint64) {
	total := in.total()
	var best []uint64
	var bestPeak uint64
	offs := make([]uint64, len(in.size))
	in.ranks = in.ranks[:0]
	for _, keys := range orders {
		o := in.order(keys, total)
		rank := make([]int32, len(o))
		for r, j := range o {
			rank[j] = int32(r)
		}
		in.ranks = append(in.ranks, rank)
		for _, bestFit := range []bool{false, true} {
			peak := in.greedy(o, bestFit, offs)
			if best == nil || peak < bestPeak {
				best, bestPeak = slices.Clone(offs), peak
				last := len(in.ranks) - 1
				in.ranks[0], in.ranks[last] = in.ranks[last], in.ranks[0]
			}
		}
	}
	return best, bestPeak
}

// greedy places the buffers in order, each in a gap between the placed
// buffers it overlaps in time: the lowest one that fits (first fit), or
// the smallest (best fit; the space above everything counts as the
// largest). It fills offs and returns the peak. The placed buffers are
// kept sorted by offset, so one pass over them lists a buffer's
// neighbours in address order: O(n) a buffer.
func (in *instance) greedy(order []int, bestFit bool, offs []uint64) uint64 {
	// The placed buffers as values, so that the scan reads memory in
	// order: the whole cost of the heuristics is this loop.
	type slot struct {
		off, top uint64
		lo, hi   int32
	}
	placed := make([]slot, 0, len(order)) // by offset
	var peak uint64
	for _, j := range order {
		size, a, lo, hi := in.size[j], in.align[j], in.lo[j], in.hi[j]
		var cur uint64 // top of the conflicting buffers so far
		found, at, gap := false, uint64(0), uint64(0)
		for _, p := range placed {
			if p.lo >= hi || lo >= p.hi {
				continue
			}
			if c := alignUp(cur, a); p.off >= c+size {
				if !bestFit {
					found, at = true, c
					break
				}
				if g := p.off - cur; !found || g < gap {
					found, at, gap = true, c, g
				}
			}
			cur = max(cur, p.top)
		}
		if !found {
			at = alignUp(cur, a)
		}
		offs[j] = at
		k, _ := slices.BinarySearchFunc(placed, at, func(p slot, t uint64) int { return cmp.Compare(p.off, t) })
		placed = slices.Insert(placed, k, slot{at, at + size, lo, hi})
		peak = max(peak, at+size)
	}
	return peak
}

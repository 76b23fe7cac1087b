// Package placement solves the offline placement problem: given buffers
// that each live over a known span of time and need a known number of
// bytes, assign each an offset in one arena so that no two buffers alive at
// the same time share a byte, and make the arena (the peak address) as
// small as possible. It is the problem google/minimalloc solves
// ("MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated
// Machine Learning", ASPLOS'23), and the one a training step's tensors pose
// once their lifetimes are known from an earlier step.
//
// # The problem
//
// A Buffer lives over [Lower, Upper) (any integer clock: event indices,
// microseconds) and takes Size bytes at an offset that is a multiple of its
// Alignment. Two buffers conflict when their lifetimes overlap; conflicting
// buffers must get disjoint address ranges. The peak is the largest
// offset+size. The problem is NP-hard (it contains bin packing), so the
// solver gives a placement always and a proof of optimality when it finds
// one within its budget.
//
// # Bounds
//
// Cut time at every Lower and Upper into sections: inside a section the set
// of live buffers does not change. No placement can have a peak below the
// largest sum of live sizes in one section (LowerBound, the "live bytes"
// of a profiler); the solver's answer is judged against it. A time point
// that no buffer lives across splits the problem into independent
// partitions (a training trace with nothing alive between steps becomes
// one partition per step); each is solved alone and the peak is their
// maximum, so a partition whose peak is at or below another's lower bound
// needs no more work.
//
// A buffer alive all through its partition conflicts with every other: it
// goes to the bottom, and the rest is solved above it (moving such a
// buffer to the bottom of any placement, and what was above it down by
// its size, keeps the placement valid, so nothing is lost). The weights
// and optimizer state of a training step are such buffers; the rest may
// then split into partitions of its own.
//
// # Heuristics: the upper bound
//
// Greedy placement takes buffers in one order and puts each at the lowest
// (first fit) or the tightest (best fit) gap left between the already
// placed buffers it conflicts with. It runs over seven orders (largest
// first; largest area first; longest-lived first, which puts weights at
// the bottom; time order, the online allocator's view; and minimalloc's
// three, which start from the largest or from the busiest section's
// buffers, its "total") and keeps the lowest peak. Each run walks the
// placed buffers in offset order once per buffer: O(n²) for n buffers;
// the fourteen runs take milliseconds for a thousand blocks and about a
// second for the 7,190 of the largest real trace (docs/plan.md). When the
// best peak equals LowerBound, the placement is optimal and the solver
// stops there; on eight of the ten real traces it does.
//
// # Branch and bound: the proof
//
// Otherwise a search looks for a placement under a capacity C. It is
// minimalloc's. It builds canonical solutions only: every buffer sits at
// the lowest aligned offset above the buffers below it that it conflicts
// with (any placement can be pushed down into one without raising its
// peak), and buffers are placed in non-decreasing offset order, so a
// buffer's only possible offset is minOff, the aligned top of the placed
// buffers it conflicts with. Each node picks the next buffer among the
// unplaced ones, ordered by minOff and then by a preorder (one of the
// heuristics' orders), with three cuts:
//
//   - canonical order: a buffer below the last placed offset, or at the
//     same offset but earlier in the preorder, is skipped (that solution
//     is reached through another branch);
//   - dominance: a buffer whose minOff is at or above the lowest
//     minOff+size of another unplaced buffer is skipped, since that other
//     buffer fits entirely below it and a solution placing it first is no
//     worse;
//   - section inference: in every section still holding unplaced buffers,
//     the placed floor (the highest top there, and at least the current
//     offset) plus the sizes still to place there must fit under C.
//
// Placing a buffer raises the minOff of the unplaced buffers it conflicts
// with and the floors of its sections; both are undone from logs on
// backtracking. Once no unplaced buffer crosses a section boundary, the
// two sides no longer interact and each is searched alone (minimalloc's
// dynamic decomposition): a side with no placement fails the branch at
// once instead of being retried against every alternative of the other.
// A node (one buffer tried at one offset) costs O(n + sections): about
// 0.1 ms for the 7,190 blocks of the largest real trace.
//
// The preorder decides how fast a search finds what exists: on a real
// trace one order walks straight to a placement at the bound while another
// wanders for millions of nodes. So each capacity is searched round-robin
// over the heuristics' orders with a node budget per order that doubles
// every round (minimalloc's restarts); an exhausted search under any order
// proves C infeasible. The capacities tried: the incumbent peak minus one
// for a few dives (the skyline placement the first dive builds often beats
// greedy), then the bound itself with a quarter of the budget (proving
// optimality at once on an easy problem), then down from the incumbent
// until a search exhausts (the peak is then optimal) or the budget runs
// out. The budget is Options.NodeLimit nodes and Options.TimeLimit; a
// capacity left unsettled proves nothing, and Solution.Optimal reports
// whether the peak returned equals a proven lower bound.
package placement

import (
	"fmt"
	"math"
	"time"
)

// A Buffer is one block to place: Size bytes, live over [Lower, Upper), at
// an offset that is a multiple of Alignment (0 and 1 mean any offset).
type Buffer struct {
	ID           string
	Lower, Upper int64
	Size         uint64
	Alignment    uint64
}

// MaxTotal bounds the sum of sizes (plus alignments) of one problem, so
// that no offset or sum overflows.
const MaxTotal = uint64(1) << 62

// DefaultNodeLimit is the search's node budget when Options.NodeLimit is 0.
const DefaultNodeLimit = 1 << 20

// Options bound the work of Solve.
type Options struct {
	// TimeLimit stops the search after this long (0: no limit). The
	// heuristics always run to the end.
	TimeLimit time.Duration
	// NodeLimit stops the search after this many nodes over all
	// partitions and capacities: 0 means DefaultNodeLimit, a negative
	// value runs the heuristics only.
	NodeLimit int64
}

// Solution is a placement.
type Solution struct {
	// Offsets holds each buffer's offset, in the order of the input.
	Offsets []uint64
	// Peak is the largest offset+size.
	Peak uint64
	// LowerBound is the largest sum of sizes alive at one time: no
	// placement's peak is below it.
	LowerBound uint64
	// Proven is the best lower bound proven: LowerBound, raised where the
	// search exhausted a capacity below Peak.
	Proven uint64
	// Optimal says Peak == Proven: no placement has a lower peak.
	Optimal bool
	// Nodes counts the search's nodes, each one buffer tried at one
	// offset (0 when the heuristics were optimal).
	Nodes int64
}

// InputError is a buffer the solver cannot take, or a problem too large.
type InputError struct {
	Index int // the buffer's position in the input
	ID    string
	Msg   string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("buffer %d (id %q): %s", e.Index, e.ID, e.Msg)
}

// CheckBuffer reports what is wrong with one buffer, or nil: a lifetime
// that is empty, a zero size, an alignment that is not a power of two, or
// a size or alignment above MaxTotal.
func CheckBuffer(b Buffer) string {
	switch {
	case b.Upper <= b.Lower:
		return fmt.Sprintf("upper %d <= lower %d: the buffer is never alive", b.Upper, b.Lower)
	case b.Size == 0:
		return "size 0: nothing to place"
	case b.Size > MaxTotal:
		return fmt.Sprintf("size %d above the limit %d", b.Size, MaxTotal)
	case b.Alignment > MaxTotal:
		return fmt.Sprintf("alignment %d above the limit %d", b.Alignment, MaxTotal)
	case b.Alignment&(b.Alignment-1) != 0:
		return fmt.Sprintf("alignment %d is not a power of two", b.Alignment)
	}
	return ""
}

// Check validates a problem: each buffer (CheckBuffer), distinct ids, and
// a total size within MaxTotal.
func Check(bufs []Buffer) error {
	seen := make(map[string]int, len(bufs))
	var total uint64
	for i, b := range bufs {
		if msg := CheckBuffer(b); msg != "" {
			return &InputError{Index: i, ID: b.ID, Msg: msg}
		}
		if j, ok := seen[b.ID]; ok {
			return &InputError{Index: i, ID: b.ID, Msg: fmt.Sprintf("duplicate id (also buffer %d)", j)}
		}
		seen[b.ID] = i
		total += b.Size + max(b.Alignment, 1)
		if total > MaxTotal {
			return &InputError{Index: i, ID: b.ID, Msg: fmt.Sprintf("the sizes up to here add up to more than %d bytes", MaxTotal)}
		}
	}
	return nil
}

// Solve places bufs (after Check) and returns the best placement found.
func Solve(bufs []Buffer, opts Options) (Solution, error) {
	if err := Check(bufs); err != nil {
		return Solution{}, err
	}
	s := &solver{nodeLimit: opts.NodeLimit}
	if s.nodeLimit == 0 {
		s.nodeLimit = DefaultNodeLimit
	}
	if opts.TimeLimit > 0 {
		s.deadline = time.Now().Add(opts.TimeLimit)
	}
	sol := Solution{Offsets: make([]uint64, len(bufs))}
	all := make([]int, len(bufs))
	for i := range all {
		all[i] = i
	}
	sol.LowerBound = newInstance(bufs, all).liveBound()
	peak, proven := s.place(bufs, all, 0, 0, sol.Offsets)
	sol.Peak = peak
	sol.Proven = min(max(proven, sol.LowerBound), peak)
	sol.Optimal = sol.Peak == sol.Proven
	sol.Nodes = s.nodes
	return sol, nil
}

// place puts bufs[idx...] at offsets from base up, into out, and returns
// their height (peak above base) and a bound on it that is proven, or at
// most floor: a height already proven for the whole problem, which they
// need not get below.
func (s *solver) place(bufs []Buffer, idx []int, base, floor uint64, out []uint64) (uint64, uint64) {
	if len(idx) == 0 {
		return 0, 0
	}
	in := newInstance(bufs, idx)
	lb := in.liveBound()
	floor = max(floor, lb)
	if parts := in.partitions(); len(parts) > 1 {
		var peak, proven uint64
		for _, p := range parts {
			pk, pr := s.place(bufs, p, base, floor, out)
			peak, proven = max(peak, pk), max(proven, pr)
		}
		return peak, max(proven, lb)
	}
	if stack, rest, w := in.bottom(); len(stack) > 0 {
		off := base
		for _, j := range stack {
			out[in.index[j]] = off
			off += in.size[j]
		}
		pk, pr := s.place(bufs, rest, base+w, floor-min(floor, w), out)
		return w + pk, w + pr
	}
	offs, peak := in.heuristics()
	proven := lb
	if peak > floor {
		offs, peak, proven = s.improve(in, offs, peak, floor)
	}
	for j, o := range offs {
		out[in.index[j]] = base + o
	}
	return peak, proven
}

// Verify checks a placement: one aligned offset per buffer, no two buffers
// alive at the same time overlapping in address, no end above MaxTotal.
// It returns the peak.
func Verify(bufs []Buffer, offsets []uint64) (uint64, error) {
	if len(offsets) != len(bufs) {
		return 0, fmt.Errorf("%d offsets for %d buffers", len(offsets), len(bufs))
	}
	var peak uint64
	for i, b := range bufs {
		o := offsets[i]
		if a := max(b.Alignment, 1); o%a != 0 {
			return 0, fmt.Errorf("buffer %d (id %q): offset %d is not a multiple of its alignment %d", i, b.ID, o, a)
		}
		if o > math.MaxUint64-b.Size || o+b.Size > MaxTotal {
			return 0, fmt.Errorf("buffer %d (id %q): offset %d + size %d beyond %d", i, b.ID, o, b.Size, MaxTotal)
		}
		peak = max(peak, o+b.Size)
	}
	if i, j, ok := findConflict(bufs, offsets); ok {
		bi, bj := bufs[i], bufs[j]
		return 0, fmt.Errorf("buffers %d (id %q, [%d,%d) at [%d,%d)) and %d (id %q, [%d,%d) at [%d,%d)) overlap in time and address",
			i, bi.ID, bi.Lower, bi.Upper, offsets[i], offsets[i]+bi.Size,
			j, bj.ID, bj.Lower, bj.Upper, offsets[j], offsets[j]+bj.Size)
	}
	return peak, nil
}

package speculate

// Bounds on a snapshot's number of events while it is imported.
//
// The speculative replay (speculate.go) starts before the import knows how
// many events the snapshot holds, and its profiler needs bounds on that
// number (profiler/length.go: it samples wherever a length within them
// would, so the fewer lengths they allow, the fewer samples it takes that
// it will not keep). The import tells where in the file the entries so
// far ended (trace.ProgressObserver); what is left of the file, at the
// bytes an entry takes, is what is left of the entries. That is an
// estimate: entries differ in size (the first of each stack spells its
// frames out, later ones refer to them through the pickle's memo, so the
// first thousand entries of a training snapshot take two to ten times the
// bytes later ones do), and a trace may change shape. estimateLength
// therefore takes the size of the last half of the entries so far, and a
// margin that is wide for a few entries and narrows with their number
// (16/sqrt(k): 25% at 4,096 entries, 1.6% at a million), plus twice the
// relative gap between the last half's size and the average's (a size
// still drifting), twice that either side of the estimate (the size
// drifts down as the memo fills, up when memo references outgrow a
// byte), and 4,096 entries and 16 times the square root of the entries
// left either side (the last few thousand entries of a snapshot may all
// be frees, smaller than the average). Below it, the file's last 64 KiB
// and a thousandth more are left for what follows the entries (a few
// hundred bytes in every snapshot tried). Each estimate only narrows the
// bounds (EventBounds.narrow). A length outside them is found when the import
// ends, and the speculative replay is then discarded: a wrong estimate
// costs a replay, never a wrong result.
//
// On the snapshots it was tried on (docs/performance.md, "Big snapshots:
// no counting pass") the length stayed within the bounds throughout, and
// the profiler's samples were about 2.3% of the events of the 1 GB one.

import (
	"math"
	"sort"
	"sync/atomic"
)

// EventBounds bounds the number of events n of a snapshot being imported:
// lo <= n <= hi (Bounds), narrowing as the import goes on, and lo == hi ==
// n once the import is over and n was within them. It implements
// profiler.LengthBounds. One goroutine narrows it (the import's), others
// read it: a read of lo then hi gives bounds at least as wide as the
// latest, never narrower.
type EventBounds struct {
	lo, hi atomic.Int64
}

func newEventBounds() *EventBounds {
	b := &EventBounds{}
	b.hi.Store(math.MaxInt64)
	return b
}

// Bounds returns the bounds: lo > hi when they crossed (the speculation
// was given up).
func (b *EventBounds) Bounds() (lo, hi int64) { return b.lo.Load(), b.hi.Load() }

// narrow raises lo and lowers hi to those given, where they narrow.
func (b *EventBounds) narrow(lo, hi int64) {
	if lo > b.lo.Load() {
		b.lo.Store(lo)
	}
	if hi < b.hi.Load() {
		b.hi.Store(hi)
	}
}

// meet sets both bounds to n, which is within them.
func (b *EventBounds) meet(n int64) {
	b.lo.Store(n)
	b.hi.Store(n)
}

// tailAllowance (and a thousandth of the file) is what estimateLength
// leaves for the bytes after the entries; estimateSlack (and 16 times the
// square root of the estimate) is its margin in entries on the entries
// left, which may be few.
const tailAllowance, estimateSlack = 64 << 10, 4096

// progressMark is where the first events entries of a snapshot ended.
type progressMark struct{ events, offset int64 }

// estimateFrom is the number of entries from which estimateLength gives
// an upper bound: the first few hundred are mostly the first of their
// stacks.
const estimateFrom = 4096

// estimateLength bounds a snapshot's number of entries from marks (in
// order, the last the latest) and the file's size (see the file comment).
// The lower bound is at least the entries seen.
func estimateLength(marks []progressMark, size int64) (lo, hi int64) {
	last := marks[len(marks)-1]
	first := marks[0]
	k, off := last.events, last.offset
	if k < estimateFrom || k <= first.events || off <= first.offset || off > size {
		return k, math.MaxInt64
	}
	// The latest mark at or before half the entries (the first if none
	// is after it).
	i := sort.Search(len(marks), func(i int) bool { return marks[i].events > k/2 }) - 1
	h := marks[max(i, 0)]
	recent := float64(off-h.offset) / float64(k-h.events)
	average := float64(off-first.offset) / float64(k-first.events)
	margin := max(0.002, 16/math.Sqrt(float64(k))) + 2*math.Abs(average-recent)/recent
	left := float64(size - off)
	// What follows the entries (the allocator's settings, annotations:
	// some hundred bytes as a rule) is not entries: the lower bound
	// leaves room for it.
	tail := float64(tailAllowance + size/1024)
	// The entries left vary in size too, the fewer the more: the last
	// ones of a snapshot may all be frees, smaller than the average.
	slack := estimateSlack + 16*math.Sqrt(left/recent)
	lo = k + int64(max(max(left-tail, 0)/(recent*(1+2*margin))-slack, 0))
	hi = k + int64(math.Ceil(left*(1+2*margin)/recent+slack)) + 1
	return lo, hi
}

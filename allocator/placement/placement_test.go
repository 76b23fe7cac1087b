package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomBuffers draws n buffers on a short clock, so that lifetimes
// overlap often, with sizes that do not all divide each other.
func randomBuffers(r *rand.Rand, n int, aligned bool) []Buffer {
	bufs := make([]Buffer, n)
	for i := range bufs {
		lo := r.Int64N(10)
		bufs[i] = Buffer{ID: fmt.Sprint(i), Lower: lo, Upper: lo + 1 + r.Int64N(6), Size: 1 + r.Uint64N(12)}
		if aligned && r.IntN(2) == 0 {
			bufs[i].Alignment = 1 << r.IntN(4)
		}
	}
	return bufs
}

// bruteForce is the true optimum: every permutation, each buffer put at
// the aligned top of the earlier buffers it overlaps in time. Every
// placement can be pushed down into one of these (each buffer resting on
// one below it or on 0) without raising its peak, so the minimum over
// them is the optimum. It shares no code with the solver.
func bruteForce(bufs []Buffer) uint64 {
	n := len(bufs)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	offs := make([]uint64, n)
	best := ^uint64(0)
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			var peak uint64
			for i, b := range bufs {
				peak = max(peak, offs[i]+b.Size)
			}
			best = min(best, peak)
			return
		}
		for i := k; i < n; i++ {
			perm[k], perm[i] = perm[i], perm[k]
			b := bufs[perm[k]]
			var top uint64
			for _, p := range perm[:k] {
				q := bufs[p]
				if b.Lower < q.Upper && q.Lower < b.Upper {
					top = max(top, offs[p]+q.Size)
				}
			}
			a := max(b.Alignment, 1)
			offs[perm[k]] = (top + a - 1) / a * a
			rec(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	rec(0)
	return best
}

// gridOptimum is the optimum by trying every offset below a bound for
// every buffer: slow, but it does not rely on pushing placements down.
func gridOptimum(bufs []Buffer, limit uint64) uint64 {
	best := ^uint64(0)
	offs := make([]uint64, len(bufs))
	var rec func(k int, peak uint64)
	rec = func(k int, peak uint64) {
		if peak >= best {
			return
		}
		if k == len(bufs) {
			best = peak
			return
		}
		b := bufs[k]
		a := max(b.Alignment, 1)
	next:
		for o := uint64(0); o+b.Size <= limit; o += a {
			for p := range k {
				q := bufs[p]
				if b.Lower < q.Upper && q.Lower < b.Upper && o < offs[p]+q.Size && offs[p] < o+b.Size {
					continue next
				}
			}
			offs[k] = o
			rec(k+1, max(peak, o+b.Size))
		}
	}
	rec(0, 0)
	return best
}

func TestSolveMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	optimal, raised := 0, 0
	for trial := range 600 {
		n := 1 + trial%7
		bufs := randomBuffers(r, n, trial%3 == 0)
		if trial%4 == 1 && n > 1 {
			// Alive all through: stacked at the bottom when its size allows.
			bufs[0].Lower, bufs[0].Upper = -1, 20
		}
		want := bruteForce(bufs)
		sol, err := Solve(bufs, Options{})
		require.NoError(t, err)
		peak, err := Verify(bufs, sol.Offsets)
		require.NoError(t, err, "trial %d: %v", trial, bufs)
		require.Equal(t, sol.Peak, peak, "trial %d: reported peak", trial)
		require.GreaterOrEqual(t, sol.Peak, want, "trial %d: below the optimum: %v", trial, bufs)
		require.LessOrEqual(t, sol.LowerBound, want, "trial %d: lower bound above the optimum", trial)
		require.LessOrEqual(t, sol.Proven, want, "trial %d: proven bound above the optimum", trial)
		if sol.Proven > sol.LowerBound {
			raised++ // the search proved more than the live bytes
		}
		if sol.Optimal {
			optimal++
			require.Equal(t, want, sol.Peak, "trial %d: claimed optimal: %v", trial, bufs)
		}
		// With the default budget these small problems are always settled.
		require.True(t, sol.Optimal, "trial %d: not proven: peak %d, optimum %d", trial, sol.Peak, want)
	}
	require.Equal(t, 600, optimal)
	require.Positive(t, raised, "no problem above its live bound: the search's proofs went untested")
}

// The search, not only the heuristics, must reach the optimum: these
// problems are built so that greedy placement in any of its orders misses.
func TestSearchBeatsHeuristics(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	searched := 0
	for trial := 0; trial < 3000 && searched < 40; trial++ {
		bufs := randomBuffers(r, 7, trial%2 == 0)
		in := newInstance(bufs, nil)
		_, hpeak := in.heuristics()
		want := bruteForce(bufs)
		if hpeak == want {
			continue
		}
		searched++
		sol, err := Solve(bufs, Options{})
		require.NoError(t, err)
		require.Positive(t, sol.Nodes)
		require.True(t, sol.Optimal)
		require.Equal(t, want, sol.Peak, "%v", bufs)
		// Heuristics only: the same problem stays at the greedy peak, unproven.
		h, err := Solve(bufs, Options{NodeLimit: -1})
		require.NoError(t, err)
		require.Equal(t, hpeak, h.Peak)
		require.False(t, h.Optimal)
		require.Zero(t, h.Nodes)
	}
	require.Positive(t, searched, "no problem where the heuristics miss: the test tests nothing")
}

func TestBruteForceAgreesWithGrid(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 150 {
		bufs := randomBuffers(r, 1+trial%4, trial%2 == 0)
		for i := range bufs {
			bufs[i].Size = 1 + bufs[i].Size%5
		}
		var sum uint64
		for _, b := range bufs {
			sum += b.Size + max(b.Alignment, 1)
		}
		require.Equal(t, gridOptimum(bufs, sum), bruteForce(bufs), "%v", bufs)
	}
}

func TestSolveKnown(t *testing.T) {
	// minimalloc's small example (benchmarks/examples/input.12.csv): the
	// optimum is the 12 bytes live over [0, 3).
	bufs := []Buffer{
		{ID: "b1", Lower: 0, Upper: 3, Size: 4},
		{ID: "b2", Lower: 3, Upper: 9, Size: 4},
		{ID: "b3", Lower: 0, Upper: 9, Size: 4},
		{ID: "b4", Lower: 9, Upper: 21, Size: 4},
		{ID: "b5", Lower: 0, Upper: 21, Size: 4},
	}
	sol, err := Solve(bufs, Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(12), sol.Peak)
	require.Equal(t, uint64(12), sol.LowerBound)
	require.True(t, sol.Optimal)

}

func TestSolveEmptyAndAlignment(t *testing.T) {
	sol, err := Solve(nil, Options{})
	require.NoError(t, err)
	require.Equal(t, Solution{Offsets: []uint64{}, Optimal: true}, sol)

	bufs := []Buffer{
		{ID: "x", Lower: 0, Upper: 2, Size: 3},
		{ID: "y", Lower: 1, Upper: 3, Size: 8, Alignment: 8},
	}
	sol, err = Solve(bufs, Options{})
	require.NoError(t, err)
	require.Zero(t, sol.Offsets[1]%8)
	require.Equal(t, uint64(11), sol.Peak) // y at 0, x at 8
	require.Equal(t, uint64(11), sol.LowerBound)
}

func TestPartitionsSolvedApart(t *testing.T) {
	// Two steps with nothing alive between them: two partitions, each
	// placed from offset 0.
	bufs := []Buffer{
		{ID: "s1a", Lower: 0, Upper: 5, Size: 10},
		{ID: "s1b", Lower: 2, Upper: 5, Size: 20},
		{ID: "s2a", Lower: 5, Upper: 9, Size: 7},
		{ID: "s2b", Lower: 6, Upper: 9, Size: 7},
	}
	in := newInstance(bufs, nil)
	require.Len(t, in.partitions(), 2)
	sol, err := Solve(bufs, Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(30), sol.Peak)
	require.True(t, sol.Optimal)
	require.Less(t, sol.Offsets[2], uint64(14))
	require.Less(t, sol.Offsets[3], uint64(14))
}

func TestSolveRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		b    []Buffer
		want string
	}{
		{[]Buffer{{ID: "a", Lower: 3, Upper: 3, Size: 1}}, `buffer 0 (id "a"): upper 3 <= lower 3`},
		{[]Buffer{{ID: "a", Lower: 0, Upper: 3, Size: 0}}, "size 0"},
		{[]Buffer{{ID: "a", Lower: 0, Upper: 3, Size: 1, Alignment: 12}}, "alignment 12 is not a power of two"},
		{[]Buffer{{ID: "a", Lower: 0, Upper: 1, Size: 1}, {ID: "a", Lower: 0, Upper: 1, Size: 1}}, `buffer 1 (id "a"): duplicate id (also buffer 0)`},
		{[]Buffer{{ID: "a", Lower: 0, Upper: 1, Size: MaxTotal}, {ID: "b", Lower: 0, Upper: 1, Size: MaxTotal}}, "add up to more than"},
	} {
		_, err := Solve(tc.b, Options{})
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestVerifyCatchesOverlap(t *testing.T) {
	bufs := []Buffer{
		{ID: "a", Lower: 0, Upper: 4, Size: 8},
		{ID: "b", Lower: 3, Upper: 6, Size: 8},
		{ID: "c", Lower: 4, Upper: 6, Size: 8, Alignment: 4},
	}
	peak, err := Verify(bufs, []uint64{0, 8, 0})
	require.NoError(t, err)
	require.Equal(t, uint64(16), peak)
	// b overlaps a in time (3..4) and now in address.
	_, err = Verify(bufs, []uint64{0, 7, 16})
	require.ErrorContains(t, err, `buffers 0 (id "a"`)
	require.ErrorContains(t, err, "overlap in time and address")
	// c starts when a ends: sharing a's bytes is fine, b's is not.
	_, err = Verify(bufs, []uint64{0, 8, 12})
	require.ErrorContains(t, err, `(id "c"`)
	_, err = Verify(bufs, []uint64{0, 8, 2})
	require.ErrorContains(t, err, "not a multiple of its alignment 4")
	_, err = Verify(bufs, []uint64{0, 8})
	require.ErrorContains(t, err, "2 offsets for 3 buffers")
	// Any offset change that collides is caught, in either order.
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		bs := randomBuffers(r, 6, false)
		sol, err := Solve(bs, Options{})
		require.NoError(t, err)
		i := r.IntN(len(bs))
		j := r.IntN(len(bs))
		if i == j || !(bs[i].Lower < bs[j].Upper && bs[j].Lower < bs[i].Upper) {
			continue
		}
		offs := append([]uint64(nil), sol.Offsets...)
		offs[i] = offs[j] + r.Uint64N(bs[j].Size)
		_, err = Verify(bs, offs)
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), "overlap") || strings.Contains(err.Error(), "alignment"))
	}
}

package workers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSortedQueueAgreesWithASortedList pushes and pops random entries (few
// distinct keys, so that ties fall to the worker index) and checks every
// min and pop against a list sorted by the tie rule, through growth of the
// queue's array and emptying it again.
func TestSortedQueueAgreesWithASortedList(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h sortedQueue
	var want []entry
	for step := 0; step < 20000; step++ {
		if len(want) == 0 || rng.IntN(5) < 3 && len(want) < 40 {
			e := entry{key: float64(rng.IntN(8)), w: rng.IntN(6)}
			h.push(e)
			want = append(want, e)
			slices.SortStableFunc(want, func(a, b entry) int {
				switch {
				case before(a, b):
					return -1
				case before(b, a):
					return 1
				}
				return 0
			})
		} else {
			require.Equal(t, want[0], h.min(), "step %d", step)
			require.Equal(t, want[0], h.pop(), "step %d", step)
			want = want[1:]
		}
		require.Equal(t, len(want), h.len(), "step %d", step)
	}
}

// TestAgainIsComputeForThenNext runs two clocks through the same random
// steps of a few workers: one always pushes (computeFor, waitFor) and asks
// next, the other asks again first, as worker.event does, and asks next
// only when again says no. Every step must take the same worker at the
// same wall and compute times, bit for bit, under shares that make the
// speed depend on how many compute, with compute steps of zero (the usual
// case), equal keys and equal wall times, so that the tie rule decides.
func TestAgainIsComputeForThenNext(t *testing.T) {
	for _, share := range []float64{1, 0.5, 0.3} {
		rng := rand.New(rand.NewPCG(5, uint64(share*10)))
		var plain, fast scheduler
		plain.share, fast.share = share, share
		const workers = 5
		for w := range workers {
			plain.waitFor(w, float64(w%2))
			fast.waitFor(w, float64(w%2))
		}
		wp, _ := plain.next()
		wf, _ := fast.next()
		agains := 0
		for step := 0; step < 50000; step++ {
			require.Equal(t, wp, wf, "share %v step %d", share, step)
			require.Equal(t, plain.now, fast.now, "share %v step %d", share, step)
			require.Equal(t, plain.v, fast.v, "share %v step %d", share, step)
			// Mostly multiples of a quarter microsecond, exact in floating
			// point, so that keys and times come out equal and the tie
			// rule decides; now and then any time at all.
			ns := 0.0
			switch r := rng.IntN(8); {
			case r < 4:
				ns = float64(rng.IntN(12)) * 250
			case r == 4 && step%2000 == 0:
				ns = rng.Float64() * 3000
			}
			if rng.IntN(4) == 0 {
				plain.waitFor(wp, ns)
				fast.waitFor(wf, ns)
				wp, _ = plain.next()
				wf, _ = fast.next()
				continue
			}
			plain.computeFor(wp, ns)
			wp, _ = plain.next()
			if fast.again(wf, ns) {
				agains++
				continue
			}
			fast.computeFor(wf, ns)
			wf, _ = fast.next()
		}
		t.Logf("share %v: again took %d of the steps", share, agains)
		require.Greater(t, agains, 1000)
	}
}

// TestAgainTies: at equal times the lower worker index goes first, the
// rule next applies, whichever queue the other worker is in.
func TestAgainTies(t *testing.T) {
	for _, c := range []struct {
		other, me int
		waits     bool // the other worker waits (else it computes)
		want      bool
	}{
		{0, 1, true, false}, {1, 0, true, true},
		{0, 1, false, false}, {1, 0, false, true},
	} {
		var s scheduler
		s.share = 1
		if c.waits {
			s.waitFor(c.other, 1000)
		} else {
			s.computeFor(c.other, 1000)
		}
		// 1000 ns of compute end at 1000 ns alone on the GPU, at 2000
		// beside the other worker's.
		end := 1000.0
		if !c.waits {
			end = 2000
		}
		require.Equal(t, c.want, s.again(c.me, 1000), "%+v", c)
		if c.want {
			require.Equal(t, end, s.now)
			require.Equal(t, 1000.0, s.v)
		} else {
			require.Zero(t, s.now)
			require.Zero(t, s.v)
		}
	}
}

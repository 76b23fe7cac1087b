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

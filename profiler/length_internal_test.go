package profiler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// nextPoint against its definition: the least q > i with q+1 a multiple
// of some E in [a, b], over small ranges exhaustively and large ones at
// random (both of its loops, and the wide bounds of a length not known).
func TestNextPoint(t *testing.T) {
	brute := func(i, a, b int64) int64 {
		best := int64(math.MaxInt64)
		for e := a; e <= b; e++ {
			best = min(best, ((i+1)/e)*e+e-1)
		}
		return best
	}
	for a := int64(1); a <= 40; a++ {
		for b := a; b <= 60; b++ {
			for i := int64(-1); i <= 400; i++ {
				require.Equal(t, brute(i, a, b), nextPoint(i, a, b), "i %d, [%d, %d]", i, a, b)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a := 1 + rng.Int64N(30000)
		b := a + rng.Int64N(max(a/20, 1)+1)
		i := rng.Int64N(30000 * 1000)
		require.Equal(t, brute(i, a, b), nextPoint(i, a, b), "i %d, [%d, %d]", i, a, b)
	}
	require.Equal(t, int64(7), nextPoint(6, 1, interval(math.MaxInt64, 998)))
	require.Equal(t, int64(0), nextPoint(-1, 1, 5))
}

// interval is ceil(n/m), at least 1, for any n.
func TestInterval(t *testing.T) {
	for _, c := range []struct{ n, m, want int64 }{
		{0, 998, 1}, {1, 998, 1}, {998, 998, 1}, {999, 998, 2}, {1996, 998, 2}, {1997, 998, 3},
		{math.MaxInt64, 2, math.MaxInt64/2 + 1},
	} {
		require.Equal(t, c.want, interval(c.n, c.m), "%d/%d", c.n, c.m)
	}
}

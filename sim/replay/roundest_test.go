package replay

import (
	"math/bits"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// roundest is in [lo, hi) with no number there of more trailing zero bits
// (checked by brute force on small ranges), and lo when the range is empty.
func TestRoundest(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 20000; n++ {
		lo := rng.Uint64() >> uint(rng.Intn(64))
		hi := lo + 1 + uint64(rng.Intn(3000))
		if hi < lo {
			continue
		}
		r := roundest(lo, hi)
		require.True(t, r >= lo && r < hi, "roundest(%d, %d) = %d", lo, hi, r)
		for x := lo; x < hi; x++ {
			if x != 0 && r != 0 {
				require.LessOrEqual(t, bits.TrailingZeros64(x), bits.TrailingZeros64(r), "roundest(%d, %d) = %d, but %d", lo, hi, r, x)
			}
		}
	}
	require.EqualValues(t, 24<<30, roundest(25692209152, 25893535744)) // the 24 GiB trial
	require.EqualValues(t, 7, roundest(7, 7))
	require.EqualValues(t, uint64(1)<<63, roundest(1<<62+1, ^uint64(0)))
	require.EqualValues(t, ^uint64(0)-1, roundest(^uint64(0)-1, ^uint64(0)))
}

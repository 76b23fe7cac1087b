package replay

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddrStatesMatchesMap: the reconstruction's address table agrees
// with a Go map through growth, on 512-aligned addresses, 0 and the
// largest address included.
func TestAddrStatesMatchesMap(t *testing.T) {
	var tab addrStates
	ref := map[uint64]uint8{}
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := []uint64{0, ^uint64(0)}
	for range 5000 {
		addrs = append(addrs, rng.Uint64N(1<<20)<<9)
	}
	for range 50000 {
		a := addrs[rng.IntN(len(addrs))]
		require.Equal(t, ref[a], tab.get(a), "addr %#x", a)
		if rng.IntN(2) == 0 {
			v := uint8(rng.IntN(4))
			*tab.at(a) = v
			ref[a] = v
		}
	}
	for _, a := range addrs {
		require.Equal(t, ref[a], tab.get(a), "addr %#x", a)
	}
}

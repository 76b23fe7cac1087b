package workers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
)

// TestLiveTableAgreesWithAMap drives the table and a Go map with the same
// random inserts and removals, addresses drawn from a few clustered ranges
// (so that probe runs collide and wrap) and 0, and checks that they agree
// after every step.
func TestLiveTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab liveTable
	want := map[uint64]uint64{}
	blocks := map[uint64]*allocator.Block{}
	addr := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return 0x7f0000000000 + uint64(rng.IntN(512))*512
		case 1:
			return uint64(rng.IntN(64)) // 0 included
		case 2:
			return ^uint64(0) - uint64(rng.IntN(8))
		}
		return rng.Uint64()
	}
	for step := 0; step < 50000; step++ {
		a := addr()
		i := tab.find(a)
		v, ok := want[a]
		require.Equal(t, ok, i >= 0, "step %d: find(%#x)", step, a)
		if ok {
			require.Same(t, blocks[v], tab.at(i).b, "step %d", step)
			if rng.IntN(3) > 0 {
				tab.removeAt(i)
				delete(want, a)
			}
		} else if rng.IntN(2) == 0 {
			b := &allocator.Block{}
			want[a] = uint64(step)
			blocks[uint64(step)] = b
			tab.insert(a, live{b: b})
		}
		require.Equal(t, len(want), tab.len())
		if step%10000 == 0 {
			got := tab.appendAddrs(nil)
			var keys []uint64
			for k := range want {
				keys = append(keys, k)
			}
			slices.Sort(got)
			slices.Sort(keys)
			require.Equal(t, keys, got)
			for k, v := range want {
				j := tab.find(k)
				require.GreaterOrEqual(t, j, 0)
				require.Same(t, blocks[v], tab.at(j).b)
			}
		}
	}
	tab.reset()
	require.Zero(t, tab.len())
	require.Less(t, tab.find(0x7f0000000000), 0)
}

package workers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
)

// TestLiveTableAgreesWithAMap drives the table and a Go map with the same
// random inserts, removals and record_streams, addresses drawn from a few
// clustered ranges (so that probe runs collide and wrap) and 0, and checks
// that they agree after every step, through releases of the table and
// reuse of released slots: the block under each address, and the
// streams and freed flag kept aside, which must leave with their slot (an
// address used again starts with none).
func TestLiveTableAgreesWithAMap(t *testing.T) {
	type entry struct {
		b       *allocator.Block
		streams []allocator.Stream
		freed   bool
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var tab liveTable
	want := map[uint64]*entry{}
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
	same := func(step, i int, e *entry) {
		require.Same(t, e.b, tab.block(i), "step %d", step)
		st := tab.streamsOf(i)
		if len(e.streams) == 0 {
			require.Nil(t, st, "step %d", step)
			return
		}
		require.NotNil(t, st, "step %d", step)
		require.Equal(t, e.streams, st.streams, "step %d", step)
		require.Equal(t, e.freed, st.freed, "step %d", step)
	}
	for step := 0; step < 50000; step++ {
		a := addr()
		i := tab.find(a)
		e, ok := want[a]
		require.Equal(t, ok, i >= 0, "step %d: find(%#x)", step, a)
		if ok {
			same(step, i, e)
			switch rng.IntN(6) {
			case 0, 1, 2:
				tab.removeAt(i)
				delete(want, a)
				// The address just removed is absent; and present again
				// once inserted again.
				require.Less(t, tab.find(a), 0, "step %d", step)
				if rng.IntN(3) == 0 {
					e := &entry{b: &allocator.Block{}}
					want[a] = e
					tab.insert(a, e.b)
					same(step, tab.find(a), e)
				}
			case 3, 4:
				s := allocator.Stream(rng.IntN(3))
				tab.addStream(i, s)
				if !slices.Contains(e.streams, s) {
					e.streams = append(e.streams, s)
				}
			default:
				if st := tab.streamsOf(i); st != nil {
					st.freed = true
					e.freed = true
				}
			}
		} else if rng.IntN(2) == 0 {
			e := &entry{b: &allocator.Block{}}
			want[a] = e
			tab.insert(a, e.b)
			same(step, tab.find(a), e)
		}
		require.Equal(t, len(want), tab.len())
		if step%7001 == 7000 {
			// Empty it, and go on in a released table's slots (the
			// table's own, or another's from the spare list).
			tab.release()
			clear(want)
			var other liveTable
			other.insert(1, &allocator.Block{})
			other.release()
		}
		if step%10000 == 0 {
			got := tab.appendAddrs(nil)
			var keys []uint64
			for k := range want {
				keys = append(keys, k)
			}
			slices.Sort(got)
			slices.Sort(keys)
			require.Equal(t, keys, got)
			for k, e := range want {
				j := tab.find(k)
				require.GreaterOrEqual(t, j, 0)
				same(step, j, e)
			}
		}
	}
	tab.reset()
	require.Zero(t, tab.len())
	require.Empty(t, tab.side)
	require.Less(t, tab.find(0x7f0000000000), 0)
}

// TestLiveTableGrowingAddresses is the trial model's pattern, which the
// table's two probe-free answers (an address above all held, the one last
// removed) serve: addresses that only grow within a task, freed in any
// order, each free looked up again (its free_completed) and the table
// emptied between tasks, whose addresses start low again; with, now and
// then, an old address allocated again right after its free, as a
// recorded trace may. Checked against a map after every step.
func TestLiveTableGrowingAddresses(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var tab liveTable
	want := map[uint64]*allocator.Block{}
	check := func(step int, a uint64) {
		i := tab.find(a)
		b, ok := want[a]
		require.Equal(t, ok, i >= 0, "step %d: find(%#x)", step, a)
		if ok {
			require.Same(t, b, tab.block(i), "step %d", step)
		}
	}
	for task := 0; task < 20; task++ {
		next := uint64(0x7f0000000000)
		var held []uint64
		for step := 0; step < 3000; step++ {
			if len(held) == 0 || rng.IntN(5) < 3 {
				check(step, next)
				b := &allocator.Block{}
				tab.insert(next, b)
				want[next] = b
				held = append(held, next)
				next += uint64(rng.IntN(4)+1) * 512
				continue
			}
			k := rng.IntN(len(held))
			a := held[k]
			held[k] = held[len(held)-1]
			held = held[:len(held)-1]
			i := tab.find(a)
			require.GreaterOrEqual(t, i, 0, "step %d", step)
			tab.removeAt(i)
			delete(want, a)
			check(step, a) // the free_completed
			if rng.IntN(10) == 0 {
				check(step, a)
				b := &allocator.Block{}
				tab.insert(a, b) // the address again, below the greatest
				want[a] = b
				held = append(held, a)
				check(step, a)
			}
			if len(held) > 0 {
				check(step, held[rng.IntN(len(held))])
			}
			check(step, next)
		}
		for _, a := range held {
			tab.removeAt(tab.find(a))
			delete(want, a)
			check(0, a)
		}
		require.Zero(t, tab.len())
	}
}

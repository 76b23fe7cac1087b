package allocator

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A sweep keeps a small table and clears it (the swept sizes come back
// before the next sweep, and a table made anew grew again through every
// doubling); a large one far beyond what remains is made smaller.
func TestBucketTableResetKeepsASmallTable(t *testing.T) {
	var tab bucketTable
	for i := 0; i < 100; i++ {
		tab.add(&bucket{key: bkey{size: uint64(512 * (i + 1))}})
	}
	require.Equal(t, 256, len(tab.slots))
	before := &tab.slots[0]
	tab.reset(3)
	require.Equal(t, 256, len(tab.slots), "kept")
	require.Same(t, before, &tab.slots[0], "the same slots, cleared")
	require.Zero(t, tab.n)
	for _, s := range tab.slots {
		require.Nil(t, s)
	}
	// Still a working table after the reset.
	bk := &bucket{key: bkey{size: 4096}}
	tab.add(bk)
	require.Same(t, bk, tab.get(bkey{size: 4096}))
	require.Nil(t, tab.get(bkey{size: 512}))

	tab.resize(1 << 16)
	tab.reset(3)
	require.Equal(t, 16, len(tab.slots), "a large table over 4x what remains is made again, smaller")
	tab.reset(10_000)
	require.Equal(t, 32768, len(tab.slots), "room for what remains")
}

// The table answers as a Go map through adds, growth and resets (the free
// set's sweep: reset, then the surviving buckets added back). Keys share
// sizes across streams and streams across sizes, so a probe that compared
// only part of the key, stopped at a taken slot, or lost a bucket when
// growing or after a reset gives a wrong answer here.
func TestBucketTableAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 24))
	var tab bucketTable
	ref := map[bkey]*bucket{}
	key := func() bkey {
		return bkey{Stream(rng.IntN(4)), uint64(rng.IntN(2000)+1) * 512}
	}
	for step := 0; step < 200_000; step++ {
		k := key()
		if ref[k] == nil && rng.IntN(2) == 0 {
			bk := &bucket{key: k}
			tab.add(bk)
			ref[k] = bk
		}
		if got := tab.get(k); got != ref[k] {
			t.Fatalf("step %d: get(%v) = %p, want %p", step, k, got, ref[k])
		}
		if tab.n != len(ref) {
			t.Fatalf("step %d: %d buckets, want %d", step, tab.n, len(ref))
		}
		if step%5_000 == 4_999 {
			// A sweep: keep about half, in the map's (random) order.
			kept := map[bkey]*bucket{}
			for k, bk := range ref {
				if rng.IntN(2) == 0 {
					kept[k] = bk
				}
			}
			tab.reset(len(kept))
			for _, bk := range kept {
				tab.add(bk)
			}
			ref = kept
		}
		if step%10_000 == 0 {
			for k, bk := range ref {
				if tab.get(k) != bk {
					t.Fatalf("step %d: %v lost", step, k)
				}
			}
			for i := 0; i < 100; i++ {
				if k := key(); tab.get(k) != ref[k] {
					t.Fatalf("step %d: get(%v) = %p, want %p", step, k, tab.get(k), ref[k])
				}
			}
		}
	}
}

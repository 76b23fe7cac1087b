package allocator

import (
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

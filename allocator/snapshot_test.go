package allocator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// The snapshot's segments are carved from one array and their blocks from
// another: each segment's blocks are a slice of their own length (appending
// to one never overwrites the next segment's), the segments come by
// address, each segment's blocks tile it, and an allocator with nothing
// reserved has no segments (nil, as before).
func TestSnapshotSegmentsOwnBlocks(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 36, NoContextOverhead: true}, conf, allocator.WithInvariantChecks())
		require.Nil(t, a.Snapshot().Segments, conf)

		var live []*allocator.Block
		for i := range 40 {
			b, err := a.Malloc(uint64(1+i%5)*(3<<20)+uint64(i%3)*512, allocator.Stream(i%2))
			require.NoError(t, err)
			live = append(live, b)
		}
		for i, b := range live {
			if i%3 == 0 {
				require.NoError(t, a.Free(b))
			}
		}
		segs := a.Snapshot().Segments
		require.GreaterOrEqual(t, len(segs), 2, conf)
		for i, s := range segs {
			require.NotEmpty(t, s.Blocks, conf)
			require.Equal(t, len(s.Blocks), cap(s.Blocks), "%s: segment %d", conf, i)
			if i > 0 {
				require.Less(t, segs[i-1].Address, s.Address, conf)
			}
			at, total := s.Address, uint64(0)
			for _, b := range s.Blocks {
				require.Equal(t, at, b.Address, conf)
				at += b.Size
				total += b.Size
			}
			require.Equal(t, s.TotalSize, total, conf)
		}
		next := append([]allocator.BlockInfo(nil), segs[1].Blocks...)
		_ = append(segs[0].Blocks, allocator.BlockInfo{Address: 1})
		require.Equal(t, next, segs[1].Blocks, conf)
	}
}

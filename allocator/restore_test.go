package allocator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

const mib = 1 << 20

func TestRestoreRebuildsLayoutAndStats(t *testing.T) {
	_, proc, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "", allocator.WithInvariantChecks())
	bases, live, err := a.Restore([]allocator.RestoreSegment{
		{Size: 20 * mib, Blocks: []allocator.RestoreBlock{
			{Size: 2 * mib, Requested: 2*mib - 7, Allocated: true},
			{Size: 4 * mib, Requested: 1},
			{Size: 2 * mib, Requested: 1}, // merges with the free block before it
			{Size: 12 * mib, Requested: 12 * mib, Allocated: true},
		}},
		{Size: 2 * mib, Small: true, Blocks: []allocator.RestoreBlock{{Size: 2 * mib}}},
	})
	require.NoError(t, err)
	require.Len(t, bases, 2)
	require.Len(t, live[0], 2)
	require.Empty(t, live[1])
	require.Equal(t, bases[0], live[0][0].Addr())
	require.Equal(t, bases[0]+8*mib, live[0][1].Addr())

	st := a.Stats()
	require.EqualValues(t, 22*mib, st.ReservedBytes[allocator.StatAll].Current)
	require.EqualValues(t, 14*mib, st.AllocatedBytes[allocator.StatAll].Current)
	require.EqualValues(t, 14*mib-7, st.RequestedBytes[allocator.StatAll].Current)
	require.EqualValues(t, 1, st.InactiveSplit[allocator.StatLarge].Current)
	require.EqualValues(t, 6*mib, st.InactiveSplitBytes[allocator.StatLarge].Current)
	require.Zero(t, st.NumDeviceAlloc, "restored segments are not device allocations of the trace")
	require.EqualValues(t, 22*mib, proc.Used())

	snap := a.Snapshot()
	require.Len(t, snap.Segments, 2)
	var sizes []uint64
	for _, seg := range snap.Segments {
		if seg.Address == bases[0] {
			for _, b := range seg.Blocks {
				sizes = append(sizes, b.Size)
			}
		}
	}
	require.Equal(t, []uint64{2 * mib, 6 * mib, 12 * mib}, sizes)

	// The merged free block serves a 5 MiB request by best fit, split.
	b, err := a.Malloc(5*mib, 0)
	require.NoError(t, err)
	require.Equal(t, bases[0]+2*mib, b.Addr())
	require.Zero(t, a.Stats().NumDeviceAlloc)

	// Freeing everything leaves one whole free segment, released by
	// empty_cache.
	for _, x := range append(live[0], b) {
		require.NoError(t, a.Free(x))
	}
	require.NoError(t, a.EmptyCache())
	require.Zero(t, proc.Used())
	require.EqualValues(t, 2, a.Stats().NumDeviceFree)
}

func TestRestoreRejectsBadInput(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "", allocator.WithInvariantChecks())
	_, _, err := a.Restore([]allocator.RestoreSegment{{Size: 4 * mib, Blocks: []allocator.RestoreBlock{{Size: 2 * mib}}}})
	require.ErrorContains(t, err, "add up to")
	_, _, err = a.Restore([]allocator.RestoreSegment{{Size: 64 << 30, Blocks: []allocator.RestoreBlock{{Size: 64 << 30}}}})
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)

	_, _, e, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "expandable_segments:True")
	_, _, err = e.Restore([]allocator.RestoreSegment{{Size: 2 * mib, Blocks: []allocator.RestoreBlock{{Size: 2 * mib}}}})
	require.ErrorContains(t, err, "expandable")
}

func TestFreeSummary(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "", allocator.WithInvariantChecks())
	total, largest := a.FreeSummary()
	require.Zero(t, total)
	require.Zero(t, largest)
	b1, err := a.Malloc(4*mib, 0) // a 20 MiB segment split: 16 MiB free
	require.NoError(t, err)
	s, err := a.Malloc(1000, 7) // a small segment on stream 7: 2 MiB - 1024 free
	require.NoError(t, err)
	total, largest = a.FreeSummary()
	require.EqualValues(t, 16*mib+2*mib-1024, total)
	require.EqualValues(t, 16*mib, largest)
	require.NoError(t, a.Free(b1))
	require.NoError(t, a.Free(s))
	total, largest = a.FreeSummary()
	require.EqualValues(t, 22*mib, total)
	require.EqualValues(t, 20*mib, largest)
}

// The handles of several segments come back in arrays of their own
// length: appending to one segment's never overwrites the next one's, and
// a segment with no allocated block has none (nil).
func TestRestoreHandlesPerSegment(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "", allocator.WithInvariantChecks())
	bases, live, err := a.Restore([]allocator.RestoreSegment{
		{Size: 4 * mib, Blocks: []allocator.RestoreBlock{{Size: 2 * mib, Allocated: true}, {Size: 2 * mib, Allocated: true}}},
		{Size: 2 * mib, Blocks: []allocator.RestoreBlock{{Size: 2 * mib}}},
		{Size: 2 * mib, Blocks: []allocator.RestoreBlock{{Size: 2 * mib, Allocated: true}}},
	})
	require.NoError(t, err)
	require.Len(t, bases, 3)
	require.Len(t, live[0], 2)
	require.Nil(t, live[1])
	require.Len(t, live[2], 1)
	third := live[2][0]
	require.Equal(t, bases[2], third.Addr())
	_ = append(live[0], nil)
	require.Same(t, third, live[2][0], "appending to segment 0's handles left segment 2's alone")
}

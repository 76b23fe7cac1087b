package allocator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// cachedOnStreams leaves one cached small segment on each of n streams,
// with a block still live on every third one.
func cachedOnStreams(t testing.TB, n int) *allocator.Allocator {
	card, err := gpu.New(gpu.Options{Capacity: 1 << 40, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	a, err := allocator.New(proc, config.Default(), allocator.WithInvariantChecks())
	require.NoError(t, err)
	for i := range n {
		b, err := a.Malloc(uint64(512*(i%7+1)), allocator.Stream(i+1))
		require.NoError(t, err)
		if i%3 != 0 {
			require.NoError(t, a.Free(b))
		}
	}
	return a
}

// FreeSummary, kept as blocks come and go, agrees with the free blocks of
// the snapshot.
func TestFreeSummaryManyStreams(t *testing.T) {
	a := cachedOnStreams(t, 3000)
	check := func() {
		var total, largest uint64
		for _, s := range a.Snapshot().Segments {
			for _, b := range s.Blocks {
				if b.State == "inactive" {
					total += b.Size
					largest = max(largest, b.Size)
				}
			}
		}
		gotTotal, gotLargest := a.FreeSummary()
		require.Equal(t, total, gotTotal)
		require.Equal(t, largest, gotLargest)
		require.Positive(t, total)
	}
	check()
	require.NoError(t, a.EmptyCache())
	check()
}

// FreeSummary with a free block on each of 100,000 streams: it used to
// walk one bucket per stream.
func BenchmarkFreeSummaryManyStreams(b *testing.B) {
	card, _ := gpu.New(gpu.Options{Capacity: 1 << 40, NoContextOverhead: true})
	proc, _ := card.NewProcess()
	a, _ := allocator.New(proc, config.Default())
	for i := range 100000 {
		blk, err := a.Malloc(512, allocator.Stream(i+1))
		if err != nil {
			b.Fatal(err)
		}
		_ = blk
	}
	for b.Loop() {
		a.FreeSummary()
	}
}

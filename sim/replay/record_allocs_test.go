package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// Recording an allocator adds no heap allocation per entry: a cached
// malloc and free allocate as much with a Recording attached as without
// (the event passed to emit used to be made per entry, on the heap).
func TestRecordAllocatesNothingPerEntry(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	pair := func(record bool) float64 {
		card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
		require.NoError(t, err)
		proc, err := card.NewProcess()
		require.NoError(t, err)
		a, err := allocator.New(proc, config.Default())
		require.NoError(t, err)
		var last trace.Event
		n := 0
		if record {
			replay.Record(a, 0, func(e *trace.Event) { last = *e; n++ })
		}
		b, err := a.Malloc(1000, 0) // the segment, outside the measure
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
		allocs := testing.AllocsPerRun(1000, func() {
			b, err := a.Malloc(1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Free(b); err != nil {
				t.Fatal(err)
			}
		})
		if record {
			require.Greater(t, n, 3000, "alloc, free_requested, free_completed per pair")
			require.Equal(t, trace.ActionFreeCompleted, last.Action)
		}
		return allocs
	}
	require.Equal(t, pair(false), pair(true))
}

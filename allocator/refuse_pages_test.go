package allocator_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// simVM is what the allocator sees of a gpu.Process without its
// PageRefuser: it maps page by page.
type simVM interface {
	allocator.Device
	allocator.VirtualMemory
}

type pageByPage struct{ simVM }

// expandableRun serves a workload with expandable segments whose large
// requests do not fit, on a process answering RefusePages or not, and
// returns what the allocator decided and what the device counted.
func expandableRun(t testing.TB, refuse bool, requests []uint64) ([]allocator.TraceEntry, allocator.Stats, gpu.Counters) {
	card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	var dev allocator.Device = proc
	if !refuse {
		dev = pageByPage{proc}
	}
	cfg := config.Default()
	cfg.ExpandableSegments = true
	a, err := allocator.New(dev, cfg)
	require.NoError(t, err)
	var entries []allocator.TraceEntry
	a.AddObserver(func(e allocator.TraceEntry) { entries = append(entries, e) })
	var live []*allocator.Block
	for _, n := range requests {
		b, err := a.Malloc(n, 0)
		var oom *allocator.OutOfMemoryError
		if errors.As(err, &oom) {
			continue
		}
		require.NoError(t, err)
		live = append(live, b)
	}
	for _, b := range live {
		require.NoError(t, a.Free(b))
	}
	require.NoError(t, a.EmptyCache())
	return entries, a.Stats(), proc.Counters()
}

// Refusing a run of pages at once decides exactly as creating them one by
// one until the device runs out, and counts the same calls and time.
func TestRefusePagesSameDecisionsAndCounts(t *testing.T) {
	const mib = 1 << 20
	requests := []uint64{300 * mib, 900 * mib, 100 * mib, 2000 * mib, 600 * mib, 700 * mib, 40 * mib}
	e1, s1, c1 := expandableRun(t, true, requests)
	e2, s2, c2 := expandableRun(t, false, requests)
	require.Equal(t, e2, e1)
	require.Equal(t, s2, s1)
	require.Equal(t, c2, c1)
	require.Positive(t, c1.Get(gpu.CallCreatePage).Failures, "the workload must run out while mapping")
}

// A failed huge request with expandable segments: refused at once rather
// than 52,000 cuMemCreate calls and as many releases (issue 16, item 6).
func BenchmarkExpandableHugeOOM(b *testing.B) {
	for _, refuse := range []bool{true, false} {
		name := "page-by-page"
		if refuse {
			name = "refused"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				expandableRun(b, refuse, []uint64{1 << 30, 1 << 30})
			}
		})
	}
}

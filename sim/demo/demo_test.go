package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunIsDeterministicAndShowsFragmentation(t *testing.T) {
	o := DefaultOptions()
	o.Trials = 12
	def, err := Run("", o)
	require.NoError(t, err)
	again, err := Run("", o)
	require.NoError(t, err)
	require.Equal(t, def.Stats, again.Stats, "same seed, same decisions")

	exp, err := Run("expandable_segments:True", o)
	require.NoError(t, err)
	require.Equal(t, 12, def.TrialsRun)
	// Trials of changing shapes strand memory in split segments; expandable
	// segments map pages where they are needed instead.
	wasteDef := 1 - float64(def.PeakAllocated)/float64(def.PeakReserved)
	wasteExp := 1 - float64(exp.PeakAllocated)/float64(exp.PeakReserved)
	require.Greater(t, wasteDef, 0.05)
	require.Less(t, wasteExp, wasteDef)
	require.Zero(t, exp.Stats.Segment[0].Allocated, "expandable mode makes no cudaMalloc segments")
	require.Positive(t, exp.Stats.NumDeviceAlloc)
	require.Len(t, def.ReservedAfterTrial, 12)
}

func TestRunOOMIsReportedAndTrialPruned(t *testing.T) {
	o := DefaultOptions()
	o.Trials = 4
	o.Capacity = 4 << 30
	r, err := Run("", o)
	require.NoError(t, err)
	require.Equal(t, 4, r.TrialsRun)
	require.Positive(t, r.TrialsOOM)
	require.Contains(t, r.FirstOOM, "CUDA out of memory. Tried to allocate")
	require.EqualValues(t, r.TrialsOOM, r.Stats.NumOOMs, "one OOM prunes one trial")
	require.Zero(t, r.Stats.Allocation[0].Current, "pruned trials free their blocks")
}

func TestRunRejectsBadSettings(t *testing.T) {
	_, err := Run("max_split_size_mb:2", DefaultOptions())
	require.Error(t, err)
}

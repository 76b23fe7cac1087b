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
	require.Equal(t, def, again, "same seed, same trials, same decisions")

	exp, err := Run("expandable_segments:True", o)
	require.NoError(t, err)
	require.Equal(t, 12, def.TrialsRun)
	require.Equal(t, def.Events, exp.Events, "the same trials under both settings")
	// Trials of changing shapes strand memory in split segments; expandable
	// segments map pages where they are needed instead.
	wasteDef := 1 - float64(def.PeakAllocated)/float64(def.PeakReserved)
	wasteExp := 1 - float64(exp.PeakAllocated)/float64(exp.PeakReserved)
	require.Greater(t, wasteDef, 0.05)
	require.Less(t, wasteExp, wasteDef/4)
	require.Positive(t, def.DeviceTime)
}

// The trials are the trial model's: BERT-base, shapes drawn by the seed.
func TestTrialsAreTheTrialModels(t *testing.T) {
	o := DefaultOptions()
	specs, err := Trials(o)
	require.NoError(t, err)
	require.Len(t, specs, o.Trials)
	shapes := map[[2]int]bool{}
	for _, s := range specs {
		require.Equal(t, "bert-base", s.Model.Name)
		require.Equal(t, o.StepsPerTrial, s.Steps)
		shapes[[2]int{s.Batch, s.SeqLen}] = true
	}
	require.Greater(t, len(shapes), 4, "the shapes change from trial to trial")
	o.Seed = 2
	other, err := Trials(o)
	require.NoError(t, err)
	require.NotEqual(t, specs, other)
}

func TestRunOOMIsReportedAndTrialPruned(t *testing.T) {
	o := DefaultOptions()
	o.Trials = 4
	o.Capacity = 4 << 30
	r, err := Run("", o)
	require.NoError(t, err)
	require.Equal(t, 4, r.TrialsRun, "a pruned trial does not stop the run")
	require.Positive(t, r.TrialsOOM)
	require.Contains(t, r.FirstOOM, "CUDA out of memory. Tried to allocate")
	require.Contains(t, r.FirstOOM, "bert-base")
}

func TestRunRejectsBadSettings(t *testing.T) {
	_, err := Run("max_split_size_mb:2", DefaultOptions())
	require.Error(t, err)
	o := DefaultOptions()
	o.Trials = 0
	_, err = Run("", o)
	require.Error(t, err)
}

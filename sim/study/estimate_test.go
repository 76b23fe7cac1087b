package study

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/gpu"
)

// With EstimateBy replay, --estimate-prune prunes by the prediction
// `memreplay estimate` prints: a trial's record carries exactly
// estimate.Spec's need, and a trial that ran alone in a fresh process
// reached exactly the predicted peak reserved.
func TestEstimateByReplayIsMemreplayEstimate(t *testing.T) {
	o := baseOptions(trialsN(24))
	o.Workers = 2
	o.Policy.EstimatePrune, o.Policy.EstimateBy = true, EstimateByReplay
	o.Policy.ResetEvery = 1 // a fresh process per trial: no cache from earlier trials
	res, rep := run(t, o)
	require.Greater(t, rep.PrunedEstimate, 0, "half of 24 GiB cannot hold the large trials")
	require.Greater(t, rep.Completed, 0)
	require.Zero(t, rep.PrunedOOM, "trials predicted to fit in half the GPU fit beside each other")
	for _, r := range res.State.Records {
		sp, err := r.Spec.Spec()
		require.NoError(t, err)
		p, err := estimate.Spec(sp, estimate.Options{})
		require.NoError(t, err)
		require.Equal(t, p.NeedBytes, r.EstimateBytes, r.Label)
		switch r.Outcome {
		case PrunedEstimate:
			require.Greater(t, r.EstimateBytes, o.Capacity/2, r.Label)
			require.Contains(t, r.Error, "peak reserved + context")
		case Completed:
			require.LessOrEqual(t, r.EstimateBytes, o.Capacity/2, r.Label)
			require.Equal(t, p.PeakReservedBytes, r.PeakReserved, "%s: the trial's own peak is the prediction", r.Label)
			require.Equal(t, p.PeakReservedBytes+gpu.DefaultContextOverhead, r.EstimateBytes)
		}
	}

	// The hand count prunes differently, and a header says which was used.
	o.Policy.EstimateBy = ""
	_, hand := run(t, o)
	require.NotEqual(t, rep.PrunedEstimate, hand.PrunedEstimate)
	require.Equal(t, "replay", Options{Policy: Policy{EstimateBy: EstimateByReplay}}.JSON().EstimateBy)
	require.Empty(t, Options{Policy: Policy{EstimateBy: EstimateByHand}}.JSON().EstimateBy)

	o.Policy.EstimateBy = "guess"
	_, err := Run(o)
	require.ErrorContains(t, err, `estimate by "guess"`)
	t.Logf("pruned by the prediction %d, by the hand count %d (of %d)", rep.PrunedEstimate, hand.PrunedEstimate, rep.Planned)
}

// --estimate-by replay predicts under the study's allocator policy, as the
// packed schedule's estimate predictor does: every record carries
// estimate.Spec's need under that policy, which for some trials is not
// PyTorch's.
func TestEstimateByReplayUsesThePolicy(t *testing.T) {
	o := baseOptions(trialsN(12))
	o.Workers = 2
	o.AllocConf = "expandable_segments:True"
	o.AllocPolicy = "lifetime"
	o.Policy.EstimatePrune, o.Policy.EstimateBy = true, EstimateByReplay
	res, _ := run(t, o)
	pol, err := allocator.NewPolicy(o.AllocPolicy)
	require.NoError(t, err)
	cfg, err := config.Parse(o.AllocConf)
	require.NoError(t, err)
	differs := 0
	for _, r := range res.State.Records {
		sp, err := r.Spec.Spec()
		require.NoError(t, err)
		want, err := estimate.Spec(sp, estimate.Options{Config: &cfg, Policy: pol})
		require.NoError(t, err)
		require.Equal(t, want.NeedBytes, r.EstimateBytes, r.Label)
		pt, err := estimate.Spec(sp, estimate.Options{Config: &cfg})
		require.NoError(t, err)
		if pt.NeedBytes != want.NeedBytes {
			differs++
		}
	}
	require.Positive(t, differs, "the policy changes some trial's prediction, so the test can tell")
}

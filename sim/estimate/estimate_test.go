package estimate_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/trial"
)

func spec(t testing.TB, model string, batch, seq int, prec trial.Precision) trial.Spec {
	m, err := trial.LookupModel(model)
	require.NoError(t, err)
	return trial.Spec{Model: m, Batch: batch, SeqLen: seq, Precision: prec, Steps: 5, EvalEvery: 3}
}

// full replays the whole trial: what the short run must equal.
func full(t *testing.T, sp trial.Spec, conf *config.Config) (live, reserved uint64) {
	r, err := sp.Reader()
	require.NoError(t, err)
	res, err := replay.Run(r, replay.Options{Config: conf, Capacity: replay.UnknownCapacity})
	require.NoError(t, err)
	s := res.Devices[0].Stats
	return uint64(s.AllocatedBytes[0].Peak), uint64(s.ReservedBytes[0].Peak)
}

// The short run (Steps steps, one evaluation) reaches the whole trial's
// peaks: a trial whose peak came later (a step-4 optimizer temporary, the
// periodic evaluation) would break the shortcut.
func TestShortRunMatchesFullTrial(t *testing.T) {
	expandable, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	var specs []trial.Spec
	for _, m := range trial.Models() {
		specs = append(specs, spec(t, m.Name, 8, 128, trial.FP16))
	}
	bl := spec(t, "bert-large", 16, 256, trial.FP32)
	ckpt := spec(t, "roberta-base", 4, 512, trial.BF16)
	ckpt.GradientCheckpointing = true
	ckpt.GradAccum = 2
	sgd := spec(t, "bert-base", 32, 64, trial.FP32)
	sgd.Optimizer = trial.AdamWLoop
	specs = append(specs, bl, ckpt, sgd)
	for _, sp := range specs {
		for _, conf := range []*config.Config{nil, &expandable} {
			t.Run(fmt.Sprintf("%s/%v", sp, conf != nil), func(t *testing.T) {
				p, err := estimate.Spec(sp, estimate.Options{Config: conf})
				require.NoError(t, err)
				live, reserved := full(t, sp, conf)
				require.Equal(t, live, p.PeakLiveBytes, "peak live")
				require.Equal(t, reserved, p.PeakReservedBytes, "peak reserved")
				require.Equal(t, estimate.Steps, p.StepsSimulated)
				require.Less(t, p.Events, int64(1)<<20)
			})
		}
	}
}

func TestPredictionFigures(t *testing.T) {
	sp := spec(t, "bert-large", 16, 128, trial.FP16)
	p, err := estimate.Spec(sp, estimate.Options{})
	require.NoError(t, err)
	require.Equal(t, "hyperparameters", p.Source)
	require.Equal(t, sp.Estimate().PeakBytes, p.AnalyticLiveBytes)
	require.GreaterOrEqual(t, p.PeakReservedBytes, p.PeakLiveBytes)
	require.Equal(t, p.PeakReservedBytes+gpu.DefaultContextOverhead, p.NeedBytes)
	require.InDelta(t, float64(p.PeakReservedBytes)/float64(p.AnalyticLiveBytes)-1, p.Margin, 1e-12)
	require.Equal(t, "bert-large b16 s128 fp16", p.Label)

	// A larger batch needs more; a custom context overhead is added as given.
	big := sp
	big.Batch = 64
	q, err := estimate.Spec(big, estimate.Options{ContextOverhead: 1 << 30})
	require.NoError(t, err)
	require.Greater(t, q.PeakLiveBytes, p.PeakLiveBytes)
	require.Equal(t, q.PeakReservedBytes+1<<30, q.NeedBytes)

	// Dynamic padding is simulated whole: the draws fragment the cache.
	dyn := sp
	dyn.DynamicPadding = true
	d, err := estimate.Spec(dyn, estimate.Options{})
	require.NoError(t, err)
	require.Equal(t, 5, d.StepsSimulated)
	live, reserved := full(t, dyn, nil)
	require.Equal(t, live, d.PeakLiveBytes)
	require.Equal(t, reserved, d.PeakReservedBytes)
}

func TestTracePrediction(t *testing.T) {
	sp := spec(t, "bert-base", 8, 128, trial.FP32)
	r, err := sp.Reader()
	require.NoError(t, err)
	p, err := estimate.Trace(r, "bert.mrt", estimate.Options{})
	require.NoError(t, err)
	live, reserved := full(t, sp, nil)
	require.Equal(t, "trace", p.Source)
	require.Equal(t, live, p.PeakLiveBytes)
	require.Equal(t, reserved, p.PeakReservedBytes)
	require.Zero(t, p.AnalyticLiveBytes)
	require.InDelta(t, float64(reserved)/float64(live)-1, p.Margin, 1e-12)
}

func TestBadSpec(t *testing.T) {
	sp := spec(t, "bert-base", 8, 1024, trial.FP32) // past BERT's 512 positions
	_, err := estimate.Spec(sp, estimate.Options{})
	require.ErrorContains(t, err, "512 positions")
}

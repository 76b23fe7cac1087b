package packing_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/packing"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
)

// bertFamily draws n trials like the BERT-family study's: base models up to
// batch 64 and length 512, large ones up to 16 and 384, fp32, dynamic
// padding, a few steps (enough for each trial's peak).
func bertFamily(t *testing.T, seed uint64, n int) []packing.Item {
	rng := rand.New(rand.NewPCG(seed, 0))
	var out []packing.Item
	for i := 0; i < n; i++ {
		name := []string{"bert-base", "roberta-base", "deberta-v3-base", "bert-large", "roberta-large", "xlm-roberta-base"}[rng.IntN(6)]
		m, err := trial.LookupModel(name)
		require.NoError(t, err)
		batches, top := []int{8, 12, 16, 24, 32, 48, 64}, 512
		if name == "bert-large" || name == "roberta-large" || name == "xlm-roberta-base" {
			batches, top = []int{8, 12, 16}, 384
		}
		att := trial.SDPA
		if name == "deberta-v3-base" {
			att = trial.Eager
		}
		sp := trial.Spec{Model: m, Batch: batches[rng.IntN(len(batches))], SeqLen: 128 + 32*rng.IntN((top-128)/32+1),
			GradAccum: 1 + rng.IntN(3), Precision: trial.FP32, Optimizer: "adamw", Attention: att,
			DynamicPadding: true, Steps: 3, Seed: rng.Uint64()}
		require.NoError(t, sp.Validate())
		out = append(out, packing.Item{ID: i, Label: sp.String(), Spec: sp, Open: sp.Reader})
	}
	return out
}

type outcome struct {
	results  []workers.TaskResult
	rejected int
	adm      []packing.Admission
	sum      workers.Summary
}

// pack runs the items through the scheduler on a 24 GiB-class card, and
// checks the budget at every admission against the needs of the trials
// running then, kept here apart from the scheduler's own sum.
func pack(t *testing.T, it []packing.Item, pred packing.Predictor, prior float64) outcome {
	const capacity = 24125 << 20 // 23.56 GiB, the card of the BERT-family study
	var out outcome
	running := map[int]uint64{}
	i := 0
	s, err := packing.New(packing.Options{
		Capacity: capacity, Predict: pred, PriorRatio: prior,
		Source: func() (packing.Item, bool) {
			if i == len(it) {
				return packing.Item{}, false
			}
			i++
			return it[i-1], true
		},
		Reject: func(packing.Item, uint64, time.Duration) error { out.rejected++; return nil },
		Admitted: func(a packing.Admission) {
			running[a.ID] = a.Need
			var sum uint64
			for _, n := range running {
				sum += n
			}
			require.Equal(t, sum, a.Committed, "trial %d: the commitments of the running trials", a.ID)
			require.LessOrEqual(t, a.Committed, a.Capacity, "trial %d over-commits", a.ID)
			require.Equal(t, len(running), a.Running)
			out.adm = append(out.adm, a)
		},
	})
	require.NoError(t, err)
	out.sum, err = workers.Run(workers.Options{
		GPU:     gpu.Options{Capacity: capacity},
		Workers: 8, Policy: packing.Policy(workers.Policy{}),
		Compute: workers.Compute{Share: 0.5},
		Hold:    s.Hold, Next: s.Next,
		Done: func(r workers.TaskResult) error {
			delete(running, r.Task.ID)
			s.Done(r)
			out.results = append(out.results, r)
			return s.Err()
		},
	})
	require.NoError(t, err)
	return out
}

func TestPackedNeverOverCommitsAndRunsOOMFree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 x 40 trials")
	}
	most, alone := 0, 0
	for seed := uint64(1); seed <= 3; seed++ {
		it := bertFamily(t, seed, trialsN(40))
		out := pack(t, it, packing.Replay(config.Default(), nil, 24125<<20, 0), 1)
		assert.Equal(t, len(it), len(out.results)+out.rejected, "seed %d: every trial ran or was rejected", seed)
		for _, a := range out.adm {
			most = max(most, a.Running)
			if a.Alone {
				alone++
				assert.Equal(t, 1, a.Running, "seed %d: trial %d was to run alone", seed, a.ID)
			}
		}
		for _, r := range out.results {
			assert.Equal(t, workers.Completed, r.Outcome, "seed %d: %s: %s", seed, r.Task.Label, r.Err)
			assert.Zero(t, r.Retries, "seed %d: %s had to retry", seed, r.Task.Label)
		}
		assert.LessOrEqual(t, out.sum.PeakDeviceUsed, out.sum.Capacity)
	}
	assert.GreaterOrEqual(t, most, 2, "small trials ran side by side")
	assert.Positive(t, alone, "the big trials ran alone")
}

// With the analytic estimate, which runs 1.0 to 2.4 times short of what a
// trial reserves, the learned ratio keeps sharing OOM-free: an OOM, if any,
// is a trial's that ran alone (too big for the card whatever the schedule).
func TestPackedAnalyticLearnsItsRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 40 trials")
	}
	it := bertFamily(t, 1, trialsN(40))
	out := pack(t, it, packing.Analytic, 0)
	alone := map[int]bool{}
	most := 0
	for _, a := range out.adm {
		alone[a.ID] = a.Alone
		most = max(most, a.Running)
	}
	for _, r := range out.results {
		if r.Outcome != workers.Completed {
			assert.True(t, alone[r.Task.ID], "%s ran out of memory beside others: %s", r.Task.Label, r.Err)
		}
	}
	assert.GreaterOrEqual(t, most, 2)
	assert.Equal(t, len(it), len(out.results)+out.rejected)
}

package study

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
)

func limitsSpace(t *testing.T) Space {
	var ms []trial.Model
	for _, n := range []string{"bert-base", "roberta-large"} {
		m, err := trial.LookupModel(n)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	return Space{Name: "t", Models: ms, Steps: 2, EvalBatches: 1,
		Choices: Choices{BatchSizes: []int{8, 16, 32}, SeqLens: []int{128, 256, 384}, GradAccum: []int{1, 2},
			Precisions: []trial.Precision{trial.FP32}, Optimizers: []string{"adamw"}, Checkpointing: []bool{false},
			Attention: []string{trial.SDPA}, DynamicPadding: []bool{true}}}
}

// The promise of the limits: par on the emitted space, with workers that
// empty their cache between trials, finds the target PAR safe, where the
// space as given is not.
func TestLimitsSpaceGivesThePromisedPAR(t *testing.T) {
	if testing.Short() || raceOn {
		t.Skip("two par runs of BERT-sized trials (cmd/memreplay's TestParLimitsKeepTheirPromise checks the same on a tiny model)")
	}
	const capacity, k = 16 << 30, 2
	sp := limitsSpace(t)
	l, err := ModelLimits(sp, capacity, 0, config.Default(), nil, k, 0)
	require.NoError(t, err)
	require.Len(t, l.Grid, 2*3*3)
	for _, m := range l.Models {
		if !m.Allowed {
			continue
		}
		assert.LessOrEqual(t, m.PeakReserved, l.PerTrial, m.Model)
		if m.MaxBatch < 32 {
			assert.Contains(t, m.GradAccum, 2*32/m.MaxBatch, "%s keeps its effective batch", m.Model)
		}
	}
	// The space round-trips through its JSON, as the user feeds it back.
	b, err := json.Marshal(l.Space)
	require.NoError(t, err)
	back, err := ParseSpace(b)
	require.NoError(t, err)

	run := func(s Space) par.Result {
		rep, err := par.Run(par.Options{Capacity: capacity, MaxPAR: k, Mixes: 16, Seed: 1, Confidence: 0.9,
			Policy:   workers.Policy{EmptyCacheBetweenTrials: true},
			Settings: []par.Setting{{Config: config.Default()}}, Sample: par.FromSpecs(s.Sample, 0), Source: s.Name})
		require.NoError(t, err)
		return rep.Results[0]
	}
	before := run(sp)
	assert.Less(t, before.SafePAR, k, "the space as given is not safe at PAR %d", k)
	after := run(back)
	assert.GreaterOrEqual(t, after.SafePAR, k, "the limits promise PAR %d", k)
	assert.Zero(t, after.Rows[k-1].MixesWithOOM)
}

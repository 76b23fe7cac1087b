package par_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/par"
)

// The packed row of the pinned experiment: the same mixes' trials
// admitted by their peak reserved alone run without an OOM where fixed
// PAR 2 with the default allocator already has one, and beat the best
// safe fixed PAR's throughput there. With expandable segments fixed PAR 5
// is safe because the trials' peaks rarely coincide; packing reserves each
// trial's peak for its whole run, so it is OOM-free but does not beat it.
func TestPackedRowIsOOMFreeAndBeatsTheSafePAR(t *testing.T) {
	o := small(t)
	o.Packed = true
	rep, err := par.Run(o)
	require.NoError(t, err)
	for _, res := range rep.Results {
		pk := res.Packed
		require.NotNil(t, pk, res.Setting)
		assert.Equal(t, 0, pk.PAR)
		assert.Equal(t, o.Mixes, pk.Mixes)
		assert.Equal(t, o.Mixes*o.MaxPAR*3, pk.Trials, "every counted trial of the K-worker draw")
		assert.Equal(t, pk.Completed+pk.PrunedOOM+pk.Failed, pk.Trials)
		assert.Zero(t, pk.MixesWithOOM, "%s: packing by memory runs no trial out of memory", res.Setting)
		assert.Zero(t, pk.OOMs)
		assert.LessOrEqual(t, pk.PeakUsedMax, rep.Capacity)
	}
	def := rep.Results[0]
	assert.Greater(t, def.Packed.TrialsPerHour, def.Rows[def.BestPAR-1].TrialsPerHour, "packed beats the best safe fixed PAR (%d)", def.BestPAR)
	// Without the option, no packed row.
	rep, err = par.Run(small(t))
	require.NoError(t, err)
	assert.Nil(t, rep.Results[0].Packed)
}

// The configurations that ran out of memory beside others are named, most
// often first, and counted from the sharing OOMs only.
func TestOOMConfigsNameTheTrialsThatCannotShare(t *testing.T) {
	rep, err := par.Run(small(t))
	require.NoError(t, err)
	def := rep.Results[0]
	require.NotEmpty(t, def.OOMConfigs)
	total, sharing := 0, 0
	for i, c := range def.OOMConfigs {
		total += c.OOMs
		if i > 0 {
			assert.LessOrEqual(t, c.OOMs, def.OOMConfigs[i-1].OOMs)
		}
	}
	for _, row := range def.Rows {
		sharing += row.PrunedOOM - row.TooBig
	}
	assert.LessOrEqual(t, total, sharing)
	if len(def.OOMConfigs) < par.MaxOOMConfigs {
		assert.Equal(t, sharing, total, "every sharing OOM is listed")
	}
}

package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// asPyTorch drops what PyTorch's traces do not record (record_stream,
// stream synchronisation, empty_cache calls), so that a replay must infer
// them.
func asPyTorch(tr *trace.Trace) *trace.Trace {
	out := *tr
	out.Header.Source = replay.SourcePyTorch
	out.Events = nil
	for _, e := range tr.Events {
		switch e.Action {
		case trace.ActionRecordStream, trace.ActionStreamSync, trace.ActionEmptyCache:
			continue
		}
		out.Events = append(out.Events, e)
	}
	return &out
}

// PyTorch's traces leave record_stream, stream synchronisation and
// empty_cache implicit; the replay infers them (see completedBySync and
// inferEmptyCache), and some cases are undecidable from the trace alone.
// On this deliberately harsh workload (a fifth of the frees wait on another
// stream, frequent empty_cache and OOMs) recorded under every setting and
// stripped to what PyTorch records, the replay still reproduces nearly all
// decisions, and every run under the default settings exactly. The figure
// is in docs/replay.md; this test guards it.
func TestPyTorchLikeInference(t *testing.T) {
	var expected, matched int64
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= seeds(); seed++ {
			tr, cfg, _ := recordWorkload(t, conf, 600*mib, seed, steps())
			res, err := replay.RunTrace(asPyTorch(tr), replay.Options{Config: &cfg, Check: true})
			require.NoError(t, err)
			c := res.Check
			expected += c.DecisionsExpected
			matched += c.DecisionsMatched
			if conf == "" {
				require.True(t, c.Passed(), "default settings, seed %d: %v", seed, c.FirstDivergence)
			}
		}
	}
	ratio := float64(matched) / float64(expected)
	t.Logf("PyTorch-style traces: %d of %d decisions matched (%.2f%%)", matched, expected, 100*ratio)
	require.Greater(t, ratio, 0.97)
}

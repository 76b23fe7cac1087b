package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/replay"
)

// The real traces replay under every policy with the allocator's
// invariant checks after each operation (the largest without them); a partial trace's live blocks are
// placed by the policy (all of them, and reported so), not rebuilt in the
// recorded segments.
func TestRealTracesUnderPolicies(t *testing.T) {
	files := []string{
		"cs336_silmont2000_mem_snapshot.pickle",
		"cs336_silmont2000_memory_forward_fp32_128.pickle",
		"cs336_wedsonlin_medium_128_inference.pickle",
		"flexgen_opt1.3b_snapshot_legacy.pickle",
		"verl_megatron_vllm_qwen2_mem.pickle",
	}
	const large = "cs336_wedsonlin_medium_128_training.pickle"
	if !testing.Short() && !raceEnabled {
		files = append(files, large)
	}
	for _, f := range files {
		for _, name := range allocator.PolicyNames() {
			t.Run(f+"/"+name, func(t *testing.T) {
				tr := realTrace(t, f)
				_, err := replay.Prepare(tr)
				require.NoError(t, err)
				pol, err := allocator.NewPolicy(name)
				require.NoError(t, err)
				// Invariant checks walk every block (and every page of an
				// expandable reservation) after every operation: too slow
				// for the largest trace, and under the race detector.
				checks := f != large && !raceEnabled
				res, err := replay.Run(tr.NewReader(), replay.Options{Policy: pol, InvariantChecks: checks})
				require.NoError(t, err)
				require.Equal(t, name, res.Policy)
				require.Zero(t, res.Skipped, res.Problems)
				require.False(t, res.Stopped)
				if r := res.Reconstructed; r != nil {
					require.Equal(t, name != "pytorch", r.Placed)
				}
				st := res.Devices[0].Stats
				require.GreaterOrEqual(t, st.ReservedBytes[allocator.StatAll].Peak, st.AllocatedBytes[allocator.StatAll].Peak)
				if name == "stitch" {
					require.True(t, res.Config.ExpandableSegments)
				}
			})
		}
	}
}

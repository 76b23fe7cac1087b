package replay_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const (
	sharedTraces = "../../../shared/traces/pytorch"
	ownTraces    = "../../traces/pytorch" // the project's copies, with NOTICE.md
)

// realTrace reads a trace from the project's traces/, or from ../shared
// when present, or skips.
func realTrace(t *testing.T, name string) *trace.Trace {
	t.Helper()
	for _, p := range []string{filepath.Join(ownTraces, name), filepath.Join(sharedTraces, name)} {
		if _, err := os.Stat(p); err == nil {
			tr, err := trace.ReadPyTorchFile(p)
			require.NoError(t, err)
			return tr
		}
	}
	t.Skipf("%s: not in traces/pytorch, and ../shared/traces/pytorch (beside the checkout in CI) is not present", name)
	return nil
}

// Every real trace replays with its own settings to exactly the recorded
// decisions and final layout: the complete one from an empty allocator,
// the partial ones from the reconstructed start. The counts pin how much
// each check covers (decisions: the recorded segment and oom entries plus
// one per alloc address).
func TestRealTracesMatchPyTorch(t *testing.T) {
	cases := []struct {
		file               string
		events, decisions  int64
		reconstructed      bool
		initSegs, liveBlks int
		inferred           int
	}{
		// The events are the snapshots' entries: the two
		// external_annotations of three of them are beside the events.
		{"cs336_silmont2000_mem_snapshot.pickle", 97, 45, false, 0, 0, 0},
		{"cs336_silmont2000_memory_forward_bf16_128.pickle", 2811, 937, true, 43, 137, 0},
		{"cs336_silmont2000_memory_forward_fp32_128.pickle", 2043, 681, true, 29, 137, 0},
		{"cs336_wedsonlin_medium_128_inference.pickle", 3840, 1280, true, 98, 223, 0},
		{"cs336_wedsonlin_medium_128_training.pickle", 19136, 6526, true, 377, 664, 438},
		{"flexgen_opt1.3b_oom_snapshot_legacy.pickle", 1, 0, true, 176, 460, 0},
		{"flexgen_opt1.3b_snapshot_legacy.pickle", 1, 0, true, 266, 716, 1},
		{"sketchkv2_my_snapshot.pickle", 1, 0, true, 259, 840, 1},
		{"verl_megatron_vllm_qwen2_mem.pickle", 0, 0, true, 127, 543, 0},
		{"zijiandu_attention_memory_segments_only.pickle", 0, 0, true, 499, 2524, 0},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			tr := realTrace(t, c.file)
			rec, err := replay.Prepare(tr)
			require.NoError(t, err)
			// Invariant checks walk every block after every operation: too
			// slow for the largest trace under the race detector.
			checks := !raceEnabled || c.events < 5000
			res, err := replay.Run(tr.NewReader(), replay.Options{Check: true, InvariantChecks: checks})
			require.NoError(t, err)
			ch := res.Check
			// A trace without decisions has nothing to check, but its
			// end state must still follow from the rebuilt initial one.
			require.Equal(t, c.decisions == 0, ch.NothingToCheck)
			require.Equal(t, c.decisions > 0, ch.Passed())
			require.Nil(t, ch.FirstDivergence)
			require.Equal(t, c.events, res.Events)
			require.Equal(t, c.decisions, ch.DecisionsExpected)
			require.Equal(t, c.decisions, ch.DecisionsMatched)
			require.NotNil(t, ch.FinalSegmentsMatch)
			require.True(t, *ch.FinalSegmentsMatch, ch.FinalDifference)
			require.Empty(t, res.Problems)
			if !c.reconstructed {
				require.Nil(t, rec)
				require.Nil(t, res.Reconstructed)
				return
			}
			require.NotNil(t, rec)
			require.Equal(t, c.initSegs, rec.Segments)
			require.Equal(t, c.liveBlks, rec.LiveBlocks)
			require.Equal(t, c.inferred, rec.InferredSizes)
			require.Zero(t, rec.Unresolved)
			require.Equal(t, rec.Segments, res.Reconstructed.Segments)
			// The restore's cudaMallocs are not the trace's.
			dev := res.Devices[0]
			require.EqualValues(t, dev.Stats.NumDeviceAlloc, dev.Counters.Get(gpu.CallMalloc).Calls)
		})
	}
}

// A replay under another setting runs the same inputs to different
// decisions, and the check says where they first differ.
func TestRealTraceCheckFailsUnderOtherSettings(t *testing.T) {
	tr := realTrace(t, "cs336_silmont2000_mem_snapshot.pickle")
	_, err := replay.Prepare(tr)
	require.NoError(t, err)
	cfg := mustParse(t, "expandable_segments:True")
	res, err := replay.Run(tr.NewReader(), replay.Options{Check: true, Config: &cfg})
	require.NoError(t, err)
	ch := res.Check
	require.False(t, ch.Passed())
	require.NotNil(t, ch.FirstDivergence)
	require.Equal(t, int64(0), ch.FirstDivergence.Index, "the first segment_alloc becomes a segment_map")
	require.Contains(t, ch.FirstDivergence.Expected, "segment_alloc of 20971520 bytes at 0x7f217a600000")
	require.Contains(t, ch.FirstDivergence.Actual, "segment_map")
	require.Less(t, ch.DecisionsMatched, ch.DecisionsExpected)
}

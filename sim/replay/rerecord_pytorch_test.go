package replay_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/trace"
)

// recordPyTorch is replaytest.RecordPyTorch (the speculative replay's
// tests record snapshots the same way).
var recordPyTorch = replaytest.RecordPyTorch

// The snapshot spooled as the replay goes is, byte for byte, the pickle of
// the recording kept in memory: a trial trace under another setting (no
// end state in the input), and real snapshots with their own settings
// (reconstructed initial state, stacks, pending frees, OOMs skipped).
func TestRecordingOfReplayPyTorchSpooled(t *testing.T) {
	check := func(t *testing.T, load func() *trace.Trace, opts replay.Options) {
		mem, _ := recordReplay(t, load(), opts)
		var want bytes.Buffer
		require.NoError(t, trace.WritePyTorch(&want, mem))
		got := recordPyTorch(t, load(), opts)
		require.True(t, bytes.Equal(want.Bytes(), got), "spooled pickle differs from the in-memory recording's (%d vs %d bytes)", len(got), want.Len())
	}
	t.Run("trial", func(t *testing.T) {
		cfg := mustParse(t, "expandable_segments:True")
		check(t, func() *trace.Trace { return trialTrace(t, "roberta-large_b8_s256_fp32.mrt") }, replay.Options{Config: &cfg})
	})
	for _, file := range []string{
		"cs336_wedsonlin_medium_128_training.pickle",
		"flexgen_opt1.3b_oom_snapshot_legacy.pickle",
		"verl_megatron_vllm_qwen2_mem.pickle",
	} {
		t.Run(file, func(t *testing.T) {
			check(t, func() *trace.Trace { return realTrace(t, file) }, replay.Options{OOM: replay.OOMSkip})
		})
	}
}

// A recording closed without Finish (a replay that failed) leaves nothing
// behind, and Finish then reports it instead of writing.
func TestRecordingOfReplayPyTorchClosed(t *testing.T) {
	tr := trialTrace(t, "roberta-large_b8_s256_fp32.mrt")
	_, err := replay.Prepare(tr)
	require.NoError(t, err)
	dir := t.TempDir()
	var buf bytes.Buffer
	r := tr.NewReader()
	rr, err := replay.NewReplayRecorderPyTorch(&buf, dir, r, replay.ReplayRecordOptions{})
	require.NoError(t, err)
	_, err = replay.Run(r, replay.Options{Recorder: rr})
	require.NoError(t, err)
	require.Positive(t, rr.Events())
	require.NoError(t, rr.Close())
	require.ErrorContains(t, rr.Finish(), "Finish after Close")
	require.Zero(t, buf.Len())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)

	_, err = replay.NewReplayRecorderPyTorch(&buf, dir+"/missing", r, replay.ReplayRecordOptions{})
	require.ErrorContains(t, err, "spooling")
}

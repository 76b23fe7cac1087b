package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const trialTraceFile = "../../traces/trial/roberta-large_b8_s256_fp32.mrt"

// checkJSON runs `replay --check --format json` on path and returns the
// check object, requiring exit code 0.
func checkJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	code, stdout, stderr := runCLI("replay", "--check", "--format", "json", path)
	require.Equal(t, 0, code, stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	check := out["check"].(map[string]any)
	require.Equal(t, true, check["passed"])
	require.Equal(t, check["decisions_expected"], check["decisions_matched"])
	require.Equal(t, true, check["final_segments_match"])
	return check
}

// A generated trial trace has no end state; the recording of its replay
// has one, as a PyTorch snapshot and as a memreplay trace, and both replay
// to every decision the recording made.
func TestReplayRecordTrialTrace(t *testing.T) {
	dir := t.TempDir()
	pkl := filepath.Join(dir, "trial.PKL") // the extension in any case
	code, stdout, stderr := runCLI("replay", "--record", pkl, trialTraceFile)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "20498") // the report, as without --record
	require.Contains(t, stderr, "recorded the replay in "+pkl+": PyTorch snapshot")

	back, err := trace.ReadPyTorchFile(pkl)
	require.NoError(t, err)
	require.True(t, back.HasFinal)
	require.NotEmpty(t, back.Final)
	segs := 0
	for _, s := range back.Final {
		require.NotEmpty(t, s.Blocks)
		segs++
	}
	require.Positive(t, segs)
	allocs := 0
	for _, e := range back.Events {
		if e.Action == trace.ActionAlloc {
			allocs++
			require.NotZero(t, e.Stack, "alloc events carry the trial's stacks")
		}
	}
	require.Equal(t, 6831, allocs)
	check := checkJSON(t, pkl)
	require.EqualValues(t, 6831+segs, check["decisions_expected"])

	mrt := filepath.Join(dir, "es.mrt")
	code, _, stderr = runCLI("replay", "--alloc-conf", "expandable_segments:True", "--capacity", "24GiB", "--record", mrt, trialTraceFile)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "recorded the replay in "+mrt+": memreplay trace")
	o, err := trace.Open(mrt)
	require.NoError(t, err)
	defer o.Close()
	h := o.Reader.Header()
	require.Equal(t, replay.SourceReplay, h.Source)
	require.Equal(t, trialTraceFile, h.SourceFile)
	require.Equal(t, true, h.AllocatorSettings["expandable_segments"])
	require.Equal(t, uint64(24<<30), h.Devices[0].Capacity)
	require.Contains(t, h.Notes[0], "expandable_segments:True")
	require.Contains(t, h.Notes, "replayed with --capacity 24.00 GiB")
	checkJSON(t, mrt)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary files left")
}

// A partial PyTorch snapshot replayed under another setting: the pickle
// for memory_viz has that setting's layout and replays exactly, from the
// initial state reconstructed again from its events and end state.
func TestReplayRecordOtherSetting(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "es.pickle")
	code, _, stderr := runCLI("replay", "--alloc-conf", "expandable_segments:True", "--record", out, partialTrace)
	require.Equal(t, 0, code, stderr)
	back, err := trace.ReadPyTorchFile(out)
	require.NoError(t, err)
	require.Equal(t, true, back.Header.AllocatorSettings["expandable_segments"])
	require.NotEmpty(t, back.Final)
	checkJSON(t, out)

	// A failed check (exit 1) still records what the replay did.
	rec := filepath.Join(dir, "diverged.mrt")
	code, _, stderr = runCLI("replay", "--check", "--alloc-conf", "expandable_segments:True", "--record", rec, completeTrace)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "check failed")
	checkJSON(t, rec)
}

// Bad OUT: a clear error, exit code 2, before the replay, and no file.
func TestReplayRecordBadOutput(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "x.pickle")
	code, stdout, stderr := runCLI("replay", "--record", missing, completeTrace)
	require.Equal(t, 2, code)
	require.Empty(t, stdout, "nothing replayed")
	require.Contains(t, stderr, "memreplay replay: --record "+missing+": cannot create a file in "+filepath.Dir(missing)+": no such file or directory")
	_, err := os.Stat(missing)
	require.True(t, os.IsNotExist(err))

	code, _, stderr = runCLI("replay", "--record", dir, completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--record "+dir+": is a directory")

	code, _, stderr = runCLI("replay", "--record", completeTrace, completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "that is the trace being replayed")

	// A replay that fails on bad input leaves no file, temporary or not.
	data, err := os.ReadFile(completeTrace)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.pickle")
	require.NoError(t, os.WriteFile(cut, data[:1000], 0o644))
	bad := filepath.Join(t.TempDir(), "bad.csv")
	require.NoError(t, os.WriteFile(bad, []byte("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,0x100,16,0x0\n1,00:00:00.000002,free,0x100,16,0x0\n1,00:00:00.000003,free,0x100,16,0x0\n"), 0o644))
	for _, in := range []string{cut, bad} {
		for _, name := range []string{"out.pickle", "out.mrt"} {
			code, _, stderr = runCLI("replay", "--record", filepath.Join(dir, name), in)
			require.Equal(t, 2, code, stderr)
		}
	}
	code, _, stderr = runCLI("replay", "--record", filepath.Join(dir, "x.mrt"), filepath.Join(dir, "missing.pickle"))
	require.Equal(t, 2, code, stderr)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestReplayRecordHelp(t *testing.T) {
	code, stdout, _ := runCLI("help", "replay")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "--record es.pickle snapshot.pickle   # open es.pickle in pytorch.org/memory_viz")
	require.Contains(t, stdout, "--record string")
}

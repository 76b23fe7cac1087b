package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// replay --check of a trace that records no decision (a generated trial
// trace, an RMM log, a legacy snapshot) says "nothing to check" and exits
// 0: not "PASSED: 0 of 0", not "FAILED: 0 of N" with exit 1; inspect says
// the same before the replay.
//
// A generated trial written as a snapshot (convert trial.mrt trial.pickle,
// for memory_viz) has an empty segment list where no end state was
// recorded: it has nothing to check either (it was "check failed: 0 of
// 6502 decisions matched", exit 1).
func TestReplayCheckNothingToCheck(t *testing.T) {
	trial := "../../traces/trial/bert-base_b16_s128_fp16.mrt"
	pickle := filepath.Join(t.TempDir(), "trial.pickle")
	code, _, stderr := runCLI("convert", "-q", trial, pickle)
	require.Equal(t, 0, code, stderr)
	for _, file := range []string{trial, "../../trace/testdata/rmm_basic.csv", pickle} {
		code, stdout, stderr := runCLI("replay", "--check", file)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "nothing to check")
		require.Contains(t, stderr, "nothing to check")
		require.NotContains(t, stdout, "PASSED")
		require.NotContains(t, stdout, "FAILED")

		code, stdout, stderr = runCLI("replay", "--check", "--format", "json", file)
		require.Equal(t, 0, code, stderr)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		check := out["check"].(map[string]any)
		require.Contains(t, check, "passed")
		require.Nil(t, check["passed"])
		require.Equal(t, true, check["nothing_to_check"])
		require.EqualValues(t, 0, check["decisions_expected"])

		code, stdout, stderr = runCLI("inspect", file)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "no: nothing to compare")
	}
	// A trace with decisions still passes, with the key set to true.
	code, stdout, stderr := runCLI("replay", "--check", "--format", "json", completeTrace)
	require.Equal(t, 0, code, stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	check := out["check"].(map[string]any)
	require.Equal(t, true, check["passed"])
	require.NotContains(t, check, "nothing_to_check")
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// trials runs trialsCmd the way main's run does (the lead registers it
// there).
func trials(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := trialsCmd(args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestTrialsHelp(t *testing.T) {
	_, stderr, err := trials("--help")
	require.ErrorIs(t, err, pflag.ErrHelp)
	require.Contains(t, stderr, "Examples")
	require.Contains(t, stderr, "--oom-corrupts")
}

func TestTrialsBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "space.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"models": ["bert-base"], "choices": {"batch_sizes": [0], "seq_lens": [128]}}`), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--par", "0"}, "--par 0"},
		{[]string{"--par", "100000"}, "--par 100000: want 1..1024"},
		{[]string{"--schedule", "packed", "--par", "2000"}, "--par 2000"},
		{[]string{"--trials", "0"}, "--trials 0"},
		{[]string{"--format", "xml"}, `--format "xml"`},
		{[]string{"--capacity", "lots"}, "--capacity"},
		{[]string{"--alloc-conf", "max_split_size_mb:2"}, "max_split_size_mb"},
		{[]string{"--sampler", "tpe"}, `--sampler "tpe"`},
		{[]string{"--oom-corrupts", "2"}, "--oom-corrupts 2"},
		{[]string{"--fault-rate", "-0.1"}, "--fault-rate -0.1"},
		{[]string{"--max-failures", "0"}, "--max-failures 0"},
		{[]string{"--resume"}, "--resume needs --state"},
		{[]string{"--space", filepath.Join(dir, "nope.json")}, "nope.json"},
		{[]string{"--space", bad}, "space.json: choices.batch_sizes[0]: 0"},
		{[]string{"--sampler", "grid", "--trials", "99999"}, "the grid has only"},
		{[]string{"--report"}, "give one or more state files"},
		{[]string{"--report", filepath.Join(dir, "none.jsonl")}, "none.jsonl"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--bogus"}, "unknown flag"},
		{[]string{"--schedule", "greedy"}, `--schedule "greedy"`},
		{[]string{"--schedule", "packed", "--predict", "oracle"}, `--predict "oracle"`},
		{[]string{"--schedule", "packed", "--estimate-prune"}, "exclude each other"},
		{[]string{"--predict", "analytic"}, "go with --schedule packed"},
		{[]string{"--schedule", "compare", "--state", filepath.Join(dir, "c.jsonl")}, "no --state"},
		{[]string{"--capacity", "rtx-48gb"}, "rtx-24gb"},
		{[]string{"--reset-kind", "reboot"}, `--reset-kind "reboot"`},
	} {
		_, _, err := trials(c.args...)
		require.Error(t, err, c.args)
		require.Contains(t, err.Error(), c.want, c.args)
		var ue usageError
		var ie inputError
		require.True(t, errors.As(err, &ue) || errors.As(err, &ie), "exit 2 for %v: %T", c.args, err)
	}
}

func TestTrialsRunsAndResumes(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "study.jsonl")
	args := []string{"--trials", "8", "--par", "2", "--steps", "2", "--seed", "3", "--empty-cache", "--state", state}
	out, _, err := trials(args...)
	require.NoError(t, err)
	require.Contains(t, out, "Policies: PAR 2, default allocator, prune-on-oom, empty-cache")
	require.Contains(t, out, "completed per hour")

	// Running again without --resume refuses to overwrite the study.
	_, _, err = trials(args...)
	require.ErrorContains(t, err, "exists")

	// Tear the last line as a kill would, then resume.
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(state, b[:len(b)-40], 0o644))
	_, stderr, err := trials(append(args, "--resume")...)
	require.NoError(t, err)
	require.Contains(t, stderr, "dropped a torn last line")

	// Other options are refused.
	_, _, err = trials("--trials", "8", "--par", "3", "--steps", "2", "--seed", "3", "--empty-cache", "--state", state, "--resume")
	require.ErrorContains(t, err, "par: file has 2, this run 3")

	out, _, err = trials("--report", "--format", "json", state, state)
	require.NoError(t, err)
	var rep struct {
		Studies []struct {
			Planned, Finished, Runs int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Studies, 2)
	require.Equal(t, 8, rep.Studies[0].Finished)
	require.Equal(t, 2, rep.Studies[0].Runs)

	out, _, err = trials("--report", "--format", "markdown", state)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "### Study"), out)
}

func TestTrialsPackedAndCompare(t *testing.T) {
	out, _, err := trials("--schedule", "packed", "--trials", "12", "--steps", "2", "--capacity", "rtx-24gb", "--format", "json")
	require.NoError(t, err)
	var doc struct{ Studies []map[string]any }
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	reps := doc.Studies
	require.Len(t, reps, 1)
	require.Equal(t, "packed (replay prediction, at most 8 at once), default allocator, prune-on-oom", reps[0]["label"])
	require.EqualValues(t, 24125<<20, reps[0]["capacity"])
	require.EqualValues(t, 0, reps[0]["pruned_oom"])

	out, _, err = trials("--schedule", "compare", "--compare-max-par", "2", "--trials", "8", "--steps", "2")
	require.NoError(t, err)
	for _, want := range []string{"(1) PAR 1,", "(2) PAR 2,", "(3) packed (replay prediction, at most 8 at once)"} {
		require.Contains(t, out, want)
	}
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func estimateJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"estimate", "--format", "json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
	return m
}

// The DESIGN contract: keys with reserved and live; the flags and --spec
// spell the same trial.
func TestEstimateJSON(t *testing.T) {
	flags := estimateJSON(t, "--model", "bert-large", "--batch", "16", "--seq-len", "128", "--precision", "fp16")
	spec := estimateJSON(t, "--spec", `{"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16"}`)
	require.Equal(t, flags, spec)
	require.Equal(t, "bert-large b16 s128 fp16", flags["label"])
	live, reserved := flags["peak_live_bytes"].(float64), flags["peak_reserved_bytes"].(float64)
	require.Greater(t, live, float64(6<<30))
	require.GreaterOrEqual(t, reserved, live)
	require.Equal(t, reserved+500<<20, flags["need_bytes"])

	big := estimateJSON(t, "--spec", `{"model": "bert-large", "batch": 32, "seq_len": 128, "precision": "fp16"}`)
	require.Greater(t, big["peak_reserved_bytes"].(float64), reserved)

	exp := estimateJSON(t, "--alloc-conf", "expandable_segments:True", "--context-overhead", "1GiB",
		"--model", "bert-large", "--batch", "16", "--seq-len", "128", "--precision", "fp16")
	require.Equal(t, "expandable_segments:True", exp["alloc_conf"])
	require.Equal(t, exp["peak_reserved_bytes"].(float64)+1<<30, exp["need_bytes"])
}

func TestEstimateTrace(t *testing.T) {
	m := estimateJSON(t, "../../traces/trial/bert-base_b16_s128_fp16.mrt")
	require.Equal(t, "trace", m["source"])
	require.Greater(t, m["peak_reserved_bytes"].(float64), float64(1<<30))
	code, stdout, stderr := runCLI("estimate", "../../traces/trial/bert-base_b16_s128_fp16.mrt")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "peak reserved")
}

func TestEstimateBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--spec", `{"model": "bert-large", "seqlen": 128}`}, `unknown field "seqlen"`},
		{[]string{"--spec", `{"model": "bert-large", "batch": 8,`}, "--spec"},
		{[]string{"--spec", `{"batch": 8}`}, `"model" is required`},
		{[]string{"--spec", `{"model": "gpt-9"}`}, "gpt-9"},
		{[]string{"--model", "bert-base", "--seq-len", "4096"}, "512 positions"},
		{[]string{}, "--model is required"},
		{[]string{"--model", "bert-base", "../../traces/trial/bert-base_b16_s128_fp16.mrt"}, "not both"},
		{[]string{"no-such-trace.mrt"}, "no-such-trace.mrt"},
		{[]string{"--format", "csv", "--model", "bert-base"}, "--format"},
	} {
		code, _, stderr := runCLI(append([]string{"estimate"}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}

// `trials --estimate-prune --estimate-by replay` prunes by the prediction
// `estimate` prints.
func TestTrialsEstimateByReplay(t *testing.T) {
	code, stdout, stderr := runCLI("trials", "--trials", "12", "--par", "4", "--steps", "2",
		"--estimate-prune", "--estimate-by", "replay", "--format", "json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Studies []struct {
			Label          string
			PrunedEstimate int `json:"pruned_estimate"`
			Finished       int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Greater(t, out.Studies[0].PrunedEstimate, 0, stdout)
	require.Equal(t, 12, out.Studies[0].Finished)

	code, _, stderr = runCLI("trials", "--estimate-by", "guess")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--estimate-by "guess"`)
}

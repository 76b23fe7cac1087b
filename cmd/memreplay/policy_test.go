package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func jsonKeys(t *testing.T, s string) (map[string]any, []string) {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &out))
	var keys []string
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return out, keys
}

// TestReplayPolicy: --policy changes the allocator, keeps the report's
// JSON keys, names the policy, and places a partial trace's initial blocks
// itself (the recorded segments held 582 MiB; stitch needs far less).
func TestReplayPolicy(t *testing.T) {
	code, stdout, stderr := runCLI("replay", "--format", "json", partialTrace)
	require.Equal(t, 0, code, stderr)
	base, baseKeys := jsonKeys(t, stdout)
	require.Equal(t, "pytorch", base["policy"])
	for _, p := range []string{"stitch", "lifetime", "plan", "pytorch"} {
		code, stdout, stderr = runCLI("replay", "--policy", p, "--format", "json", partialTrace)
		require.Equal(t, 0, code, stderr)
		out, keys := jsonKeys(t, stdout)
		require.Equal(t, baseKeys, keys, p)
		require.Equal(t, p, out["policy"])
		frag := out["fragmentation"].(map[string]any)
		baseFrag := base["fragmentation"].(map[string]any)
		if p == "pytorch" {
			require.Equal(t, baseFrag["peak_reserved_bytes"], frag["peak_reserved_bytes"])
			continue
		}
		if p == "stitch" || p == "plan" {
			require.Less(t, frag["peak_reserved_bytes"].(float64), baseFrag["peak_reserved_bytes"].(float64))
		}
		notes := out["reconstructed"].(map[string]any)["notes"].([]any)
		require.Contains(t, notes[len(notes)-1], "placed by the "+p+" policy", p)
	}
	code, stdout, _ = runCLI("replay", "--policy", "stitch", partialTrace)
	require.Equal(t, 0, code)
	require.Regexp(t, `\| policy\s+\| stitch`, stdout)
	require.Contains(t, stdout, "expandable segments by the stitch policy")
}

// TestReplayPolicyPyTorchChecks: --policy pytorch is the exact allocator.
func TestReplayPolicyPyTorchChecks(t *testing.T) {
	code, _, stderr := runCLI("replay", "--check", "--policy", "pytorch", completeTrace)
	require.Equal(t, 0, code, stderr)
}

func TestPolicyBadNames(t *testing.T) {
	for _, c := range []struct{ args []string }{
		{[]string{"replay", "--policy", "gmlake", completeTrace}},
		{[]string{"compare", completeTrace, "--policy", "gmlake"}},
		{[]string{"compare", completeTrace, "--policy", "stitch:max_split_size_mb:1"}},
	} {
		code, _, stderr := runCLI(c.args...)
		require.Equal(t, 2, code, c.args)
		require.Contains(t, stderr, "--", c.args)
	}
}

func TestComparePolicies(t *testing.T) {
	code, stdout, stderr := runCLI("compare", "--format", "json", completeTrace, "--alloc-conf", "expandable_segments:True",
		"--policy", "stitch", "--policy", "lifetime:expandable_segments:True")
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 4)
	want := []struct{ label, policy, config string }{
		{"recorded settings", "pytorch", ""},
		{"expandable_segments:True", "pytorch", "expandable_segments:True"},
		{"policy stitch", "stitch", "expandable_segments:True"},
		{"policy lifetime + expandable_segments:True", "lifetime", "expandable_segments:True"},
	}
	for i, w := range want {
		require.Equal(t, w.label, rows[i]["label"])
		require.Equal(t, w.policy, rows[i]["policy"])
		require.Equal(t, w.config, rows[i]["config"], w.label)
		require.Greater(t, rows[i]["malloc_ns"].(float64), 0.0)
	}
	_, stitched := rows[2]["stats"].(map[string]any)["num_stitches"]
	require.True(t, stitched)
	_, stitched = rows[0]["stats"].(map[string]any)["num_stitches"]
	require.False(t, stitched)
	code, stdout, stderr = runCLI("compare", completeTrace, "--policy", "stitch")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "malloc (mean wall time)")
	require.Contains(t, stdout, "policy stitch")
}

func TestParPolicies(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--capacity", "8GiB", "--max-par", "2", "--mixes", "2", "--trials-per-worker", "1",
		"--alloc-conf", "", "--policy", "pytorch", "--policy", "stitch", "../../traces/trial/bert-base_b16_s128_fp16.mrt"}
	require.NoError(t, parCmd(args, &out, &errb), errb.String())
	require.Contains(t, out.String(), "(PyTorch defaults)")
	require.Contains(t, out.String(), "policy stitch")
	err := parCmd([]string{"--policy", "gmlake"}, &out, &errb)
	var ue usageError
	require.ErrorAs(t, err, &ue)
}

func TestTrialsPolicy(t *testing.T) {
	state := filepath.Join(t.TempDir(), "study.jsonl")
	out, _, err := trials("--trials", "4", "--par", "2", "--steps", "2", "--seed", "3", "--policy", "lifetime", "--state", state)
	require.NoError(t, err)
	require.Contains(t, out, "default allocator, policy lifetime")
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Contains(t, string(b), `"alloc_policy":"lifetime"`)
	_, _, err = trials("--trials", "4", "--policy", "gmlake")
	var ue usageError
	require.ErrorAs(t, err, &ue)
}

func TestReportPolicies(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.html")
	code, stdout, stderr := runCLI("report", completeTrace, "--policy", "stitch", "--policy", "lifetime", "-o", out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "(3 runs)")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(b), `"policy":"stitch"`)
	require.Contains(t, string(b), "policy lifetime")
	code, _, _ = runCLI("report", completeTrace, "--policy", "gmlake", "-o", out)
	require.Equal(t, 2, code)
}

// On a partial trace, compare says which columns start from the recorded
// segments and which placed the live blocks themselves (a policy other than
// PyTorch's), in the table's notes and in the JSON.
func TestComparePoliciesOnAPartialTrace(t *testing.T) {
	code, stdout, stderr := runCLI("compare", "--format", "json", partialTrace, "--policy", "stitch")
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, true, rows[0]["initial_blocks_pinned"], "the pytorch column starts from the recorded segments")
	require.Equal(t, false, rows[1]["initial_blocks_pinned"], "the stitch column placed the blocks itself")

	code, stdout, stderr = runCLI("compare", partialTrace, "--policy", "stitch")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "every pytorch-policy column starts from them as recorded")
	require.Contains(t, stdout, "policy stitch: the 137 blocks live before the first event (500.95 MiB) were placed by the stitch policy")
	require.NotContains(t, stdout, "every column starts")
}

package main

import (
	"encoding/json"
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
	for _, p := range []string{"stitch", "lifetime", "pytorch"} {
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
		if p == "stitch" {
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
		{[]string{"replay", "--policy", "plan", completeTrace}},
		{[]string{"compare", completeTrace, "--policy", "gmlake"}},
		{[]string{"compare", completeTrace, "--policy", "stitch:max_split_size_mb:1"}},
	} {
		code, _, stderr := runCLI(c.args...)
		require.Equal(t, 2, code, c.args)
		require.Contains(t, stderr, "--", c.args)
	}
	_, _, stderr := runCLI("replay", "--policy", "plan", completeTrace)
	require.Contains(t, stderr, "not available yet")
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

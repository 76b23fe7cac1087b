package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every command with --capacity takes the card presets par and trials
// take: a preset means exactly its size.
func TestCapacityPresetEverywhere(t *testing.T) {
	tr := filepath.Join("..", "..", "traces", "trial", "bert-base_b16_s128_fp16.mrt")
	run := func(args ...string) string {
		code, stdout, stderr := runCLI(args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		return stdout
	}
	// replay and demo print no timings: the whole output is the same.
	require.Equal(t, run("replay", "--capacity", "24125MiB", "--format", "json", tr),
		run("replay", "--capacity", "rtx-24gb", "--format", "json", tr))
	require.Equal(t, run("demo", "--capacity", "24125MiB", "--trials", "2", "--steps", "1"),
		run("demo", "--capacity", "rtx-24gb", "--trials", "2", "--steps", "1"))
	// compare prints measured malloc times: its devices carry the size.
	out := run("compare", "--capacity", "rtx-24gb", "--format", "json", "--alloc-conf", "expandable_segments:True", tr)
	require.Equal(t, 2, strings.Count(out, `"capacity": 25296896000,`), out)
	code, _, stderr := runCLI("replay", "--capacity", "rtx-48gb", tr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "rtx-24gb", "the error lists the presets")
}

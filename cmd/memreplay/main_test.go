package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	code, _, stderr := runCLI()
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Usage:")

	code, _, stderr = runCLI("frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown command "frobnicate"`)

	code, _, stderr = runCLI("demo", "--capacity", "lots")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--capacity")

	code, _, stderr = runCLI("demo", "--alloc-conf", "max_split_size_mb:2")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "max_split_size_mb")

	code, stdout, _ := runCLI("help", "demo")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "Examples:")
}

func TestDemoRuns(t *testing.T) {
	code, stdout, stderr := runCLI("demo", "--trials", "3", "--steps", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "expandable_segments:True")
	require.Contains(t, stdout, "(default)")
	require.Equal(t, 1, strings.Count(stdout, "Built-in workload"))
}

func TestDemoFailOnOOM(t *testing.T) {
	code, stdout, _ := runCLI("demo", "--trials", "2", "--steps", "1", "--capacity", "3GiB", "--fail-on-oom")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "CUDA out of memory")
}

// Every command the usage lists is reachable through run, with its own
// help: a command written but not registered would fail here.
func TestEveryCommandRegistered(t *testing.T) {
	for _, c := range []string{"replay", "compare", "report", "inspect", "convert", "par", "trials", "synth", "demo", "estimate"} {
		require.Contains(t, usage, "memreplay "+c+" ", c)
		code, stdout, stderr := runCLI("help", c)
		require.Equal(t, 0, code, c)
		require.Contains(t, stdout, "memreplay "+c+" ", c)
		require.Contains(t, stdout, "Examples:", c)
		code, _, stderr = runCLI(c, "--no-such-flag")
		require.Equal(t, 2, code, c)
		require.Contains(t, stderr, "no-such-flag", c)
	}
}

// --no-color is accepted by every command that prints a report, so that
// scripts can pass it everywhere.
func TestNoColorAccepted(t *testing.T) {
	for _, c := range []string{"replay", "compare", "report", "inspect", "par", "trials"} {
		_, stdout, _ := runCLI("help", c)
		require.Contains(t, stdout, "--no-color", c)
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
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

	// help for a command that does not exist is bad usage, not help.
	code, stdout, stderr := runCLI("help", "bogus")
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, `unknown command "bogus"`)

	code, stdout, _ = runCLI("help", "demo")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "Examples:")
}

func TestDemoRuns(t *testing.T) {
	code, stdout, stderr := runCLI("demo", "--trials", "3", "--steps", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "expandable_segments:True")
	require.Contains(t, stdout, "(PyTorch defaults)")
	require.Equal(t, 1, strings.Count(stdout, "3 BERT-base fine-tuning trials of 1 steps"))
	// An ASCII table with the header as written, like every other command's.
	require.Contains(t, stdout, "| alloc-conf ")
	require.Contains(t, stdout, "+-----")
	for i, r := range stdout {
		require.Less(t, r, rune(128), "non-ASCII %q at byte %d:\n%s", r, i, stdout)
	}
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

// The product speaks of what things are: the default study is the
// BERT-family study, never a name from the project's planning documents.
func TestHelpNamesTheStudyForWhatItIs(t *testing.T) {
	seeds := regexp.MustCompile(`(?i)\bseeds\b`)
	texts := map[string]string{"usage": usage}
	for _, c := range []string{"replay", "compare", "report", "inspect", "convert", "par", "trials", "synth", "demo"} {
		_, stdout, _ := runCLI("help", c)
		texts[c] = stdout
	}
	for name, text := range texts {
		require.False(t, seeds.MatchString(text), "help %s says %q", name, seeds.FindString(text))
	}
	require.Contains(t, texts["par"], "BERT-family study on\na 24 GiB card")
	for _, setting := range []string{"expandable_segments:True", "max_split_size_mb:N", "garbage_collection_threshold:F", "roundup_power2_divisions:N"} {
		require.Contains(t, texts["par"], "\n  "+setting+"\n      ", "par's help explains %s", setting)
		require.Contains(t, texts["trials"], "\n  "+setting+"\n      ", "trials' help explains %s", setting)
	}
}

// docs/cli.md's command table and the usage list the same commands.
func TestCLIDocListsEveryCommand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	// The command table is the page's first section; later tables (the
	// limits) may name commands too.
	table, _, _ := strings.Cut(string(doc), "\n## ")
	inDoc := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+) ").FindAllStringSubmatch(table, -1) {
		inDoc[m[1]] = true
	}
	inUsage := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  memreplay ([a-z]+) `).FindAllStringSubmatch(usage, -1) {
		inUsage[m[1]] = true
	}
	require.NotEmpty(t, inUsage)
	require.Equal(t, inUsage, inDoc, "commands in the usage vs in docs/cli.md's table")
}

// `memreplay CMD --help` is output the user asked for: standard output and
// exit 0, like `memreplay help CMD`, so that it pipes into a pager; a bad
// flag stays an error on stderr with exit 2.
func TestHelpFlagPrintsToStdout(t *testing.T) {
	for _, c := range []string{"replay", "compare", "report", "inspect", "convert", "par", "trials", "synth", "demo", "plan", "estimate"} {
		for _, flag := range []string{"--help", "-h"} {
			code, stdout, stderr := runCLI(c, flag)
			require.Equal(t, 0, code, "%s %s", c, flag)
			require.Empty(t, stderr, "%s %s", c, flag)
			_, want, _ := runCLI("help", c)
			require.Equal(t, want, stdout, "%s %s", c, flag)
			require.Contains(t, stdout, "Flags:\n", "%s %s prints its flags", c, flag)
		}
		code, stdout, stderr := runCLI(c, "--no-such-flag")
		require.Equal(t, 2, code, c)
		require.Empty(t, stdout, c)
		require.Contains(t, stderr, "unknown flag: --no-such-flag", c)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// synth runs synthCmd directly (the lead registers it in main.go).
func synth(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := synthCmd(args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestSynthReplays(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bert.mrt")
	stdout, _, err := synth("--model", "bert-base", "--batch", "4", "--seq-len", "64", "--precision", "fp16", "--steps", "2", "-o", out)
	require.NoError(t, err)
	require.Contains(t, stdout, "bert-base b4 s64 fp16")
	// synth measures the trial's own sizes (requested bytes); replay's
	// peak live is the same blocks after the allocator rounds them, so it
	// is never smaller. The two were once both called "peak live".
	require.Contains(t, stdout, "peak requested")
	require.NotContains(t, stdout, "peak live")
	var requested float64
	i := strings.Index(stdout, "peak requested ")
	_, err = fmt.Sscanf(stdout[i:], "peak requested %f GiB", &requested)
	require.NoError(t, err)

	o, err := trace.Open(out)
	require.NoError(t, err)
	require.Equal(t, "memreplay-trial", o.Reader.Header().Source)
	o.Close()

	code, js, stderr := runCLI("replay", "--format", "json", "--capacity", "24GiB", out)
	require.Equal(t, 0, code, stderr)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(js), &res))
	stats := res["stats"].(map[string]any)
	require.EqualValues(t, 0, stats["allocated_bytes.all.current"], "every block freed by trial_end")
	require.EqualValues(t, 0, stats["num_ooms"])
	live := res["fragmentation"].(map[string]any)["peak_live_bytes"].(float64)
	require.Greater(t, live, float64(1<<30))
	require.GreaterOrEqual(t, live/(1<<30), requested-0.005, "peak live %.3f GiB below synth's peak requested %.2f GiB", live/(1<<30), requested)
}

func TestSynthCustomShape(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lm.mrt")
	stdout, _, err := synth("--arch", "decoder-lm", "--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "500",
		"--max-positions", "32", "--batch", "2", "--seq-len", "32", "--optimizer", "adamw-loop", "--steps", "1", "-q", "-o", out)
	require.NoError(t, err)
	require.Empty(t, stdout)
	code, _, stderr := runCLI("replay", out)
	require.Equal(t, 0, code, stderr)

	// A shape flag with --model changes that model.
	stdout, _, err = synth("--model", "bert-base", "--layers", "2", "--batch", "2", "--seq-len", "16", "--steps", "1", "-o", out)
	require.NoError(t, err)
	require.Contains(t, stdout, "bert-base-custom b2 s16")
}

func TestSynthBadInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.mrt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "bert-base"}, "-o OUTPUT is required"},
		{[]string{"--model", "gpt-9", "-o", out}, `unknown model "gpt-9"`},
		{[]string{"--layers", "2", "-o", out}, "--hidden is missing"},
		{[]string{"--model", "bert-base", "--batch", "0", "-o", out}, "batch must be positive"},
		{[]string{"--model", "bert-base", "--precision", "fp8", "-o", out}, `unknown precision "fp8"`},
		{[]string{"--model", "bert-base", "--seq-len", "4096", "-o", out}, "exceeds bert-base's 512 positions"},
		{[]string{"--model", "bert-base", "--steps", "0", "-o", out}, "must be positive"},
		{[]string{"--model", "bert-base", "--batch", "many", "-o", out}, "invalid argument"},
		{[]string{"--model", "bert-base", "-o", out, "extra"}, `unexpected argument "extra"`},
		{[]string{"--model", "bert-base", "-o", filepath.Join(out, "no", "such", "dir.mrt")}, "no such file"},
	} {
		_, _, err := synth(c.args...)
		require.Error(t, err, c.args)
		require.Contains(t, err.Error(), c.want)
		var ue usageError
		var ie inputError
		require.True(t, errors.As(err, &ue) || errors.As(err, &ie), "%v: exit code 2", err)
	}
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err), "nothing written on failure")

	_, help, err := synth("--help")
	require.ErrorIs(t, err, pflag.ErrHelp)
	require.Contains(t, help, "Examples:")
}

package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay/speculate"
)

// replayOnTerminal runs replay with stderr on a terminal and returns what
// it drew there.
func replayOnTerminal(t *testing.T, args ...string) string {
	return onTerminal(t, replayCmd, args)
}

// A snapshot replayed while it is imported draws the progress it drew
// when replayed after: the same label, the events out of the same total
// (the count) once the import has counted them (before, the events
// alone), the line cleared at the end; one given up and replayed again
// too.
func TestSpeculativeReplayProgress(t *testing.T) {
	dir := t.TempDir()
	trial := filepath.Join(dir, "trial.mrt")
	code, _, stderr := runCLI("synth", "--model", "bert-base", "--batch", "1", "--seq-len", "16", "--steps", "30", "-o", trial)
	require.Zero(t, code, stderr)
	lines := regexp.MustCompile(`\r(replaying [^:]+): (\d+)(?:/(\d+))? events \(`)
	for k, conf := range []string{"", "max_split_size_mb:64"} {
		snap := filepath.Join(dir, []string{"start.pickle", "other.pickle"}[k])
		args := []string{"replay", "--record", snap, trial}
		if conf != "" {
			args = append(args, "--alloc-conf", conf)
		}
		code, _, stderr = runCLI(args...)
		require.Zero(t, code, stderr)
		var drawn [2][][]string
		for k, on := range []bool{false, true} {
			speculateAll(t, on)
			d := replayOnTerminal(t, "--format", "json", snap)
			require.True(t, bytes.HasSuffix([]byte(d), []byte("\r\x1b[K")), "the line is cleared at the end: %q", d)
			drawn[k] = lines.FindAllStringSubmatch(d, -1)
			require.NotEmpty(t, drawn[k], "%q", d)
			if on && conf == "" {
				require.Equal(t, speculate.Confirmed, lastSpeculation)
			}
		}
		require.NotEmpty(t, drawn[0][0][3], "the total, replayed after the import")
		for _, m := range drawn[1] {
			require.Equal(t, drawn[0][0][1], m[1], "label")
			if m[3] != "" {
				require.Equal(t, drawn[0][0][3], m[3], "total")
			}
		}
	}
}

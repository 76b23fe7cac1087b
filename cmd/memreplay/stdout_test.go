package main

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// fullWriter fails every write, like standard output redirected to a full
// disk (`> /dev/full`).
type fullWriter struct{ writes int }

func (w *fullWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, syscall.ENOSPC
}

// An answer that cannot be written is an error, exit 2, said on stderr:
// the commands used to exit 0 with their output lost.
func TestStdoutWriteErrors(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", partialTrace},
		{"replay", partialTrace},
		{"replay", "--format", "json", partialTrace},
		{"compare", partialTrace, "--alloc-conf", "expandable_segments:True"},
		{"trials", "--trials", "2", "--steps", "1"},
		{"demo", "--trials", "1", "--steps", "1"},
		{"help"},
		{"help", "inspect"},
	} {
		var w fullWriter
		var stderr bytes.Buffer
		code := run(args, &w, &stderr)
		require.Equal(t, 2, code, "%q: %s", args, stderr.String())
		require.Contains(t, stderr.String(), "no space left on device", "%q", args)
		require.Positive(t, w.writes, "%q", args)
	}
}

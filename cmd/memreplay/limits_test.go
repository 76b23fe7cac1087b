package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// trials reads its state and space files within bounds: a file with no
// newline (like /dev/zero) or a huge one is refused by its size, exit 2,
// and a state file given to --resume is left as it was. They used to be
// read whole (2 GiB a second from /dev/zero; a 300 MB one-line state file
// took 2.2 GB).
func TestTrialsBoundsItsInputs(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	data := bytes.Repeat([]byte("x"), 5<<20) // no newline, past both bounds
	require.NoError(t, os.WriteFile(big, data, 0o644))

	code, _, stderr := runCLI("trials", "--report", big)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, big+":1: line longer than 4194304 bytes")

	code, _, stderr = runCLI("trials", "--trials", "1", "--state", big, "--resume")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, big+":1: line longer than 4194304 bytes")
	b, err := os.ReadFile(big)
	require.NoError(t, err)
	require.Equal(t, data, b, "the file given to --resume was changed")

	code, _, stderr = runCLI("trials", "--trials", "1", "--space", big)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, big+": larger than 1048576 bytes")
}

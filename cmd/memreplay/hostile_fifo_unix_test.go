//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/internal/fifotest"
)

// A snapshot pickle from a FIFO (as from /dev/stdin or <(zcat ...)) reads
// as the file does: the importer opened the path a second time and read
// after the 64 KiB that told the format ("byte offset 0: unknown opcode").
// compare and report, which open a trace once per setting, refuse a FIFO
// with a message that says so, where the second replay found it drained
// and called it an empty file.
func TestHostileFIFO(t *testing.T) {
	src := filepath.Join("..", "..", "trace", "testdata", "pytorch_cs336_silmont2000_mem_snapshot.pickle")
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.Greater(t, len(data), 64<<10)
	code, want, stderr := runCLI("replay", "--format", "json", src)
	require.Equal(t, 0, code, stderr)

	fifo, wrote := fifotest.Feed(t, "trace.fifo", data)
	type result struct {
		code           int
		stdout, stderr string
	}
	ran := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCLI("replay", "--format", "json", fifo)
		ran <- result{code, stdout, stderr}
	}()
	var r result
	select {
	case r = <-ran:
	case <-time.After(time.Minute):
		// The speculative replay opened the FIFO to look at its first
		// bytes and closed it; the import's open then waited for a
		// writer that had gone.
		t.Fatal("replay of a FIFO still waiting after a minute")
	}
	code, got, stderr := r.code, r.stdout, r.stderr
	require.NoError(t, wrote())
	require.Equal(t, 0, code, stderr)
	// The same report but for the file's name.
	require.True(t, want == strings.ReplaceAll(got, fifo, src), "the report from the FIFO differs from the file's")

	fifo = filepath.Join(t.TempDir(), "nobody.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	code, _, stderr = runCLI("compare", "--alloc-conf", "expandable_segments:True", fifo)
	require.Equal(t, 2, code, stderr)
	require.Equal(t, "memreplay compare: "+fifo+": not a regular file (a pipe or a FIFO), which compare would read 2 times, once per setting: save it to a file first\n", stderr)
	code, _, stderr = runCLI("report", "--policy", "lifetime", "-o", filepath.Join(t.TempDir(), "r.html"), fifo)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, fifo+": not a regular file (a pipe or a FIFO), which report would read 2 times")
}

//go:build unix

package trace

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A snapshot pickle read from a FIFO (or /dev/stdin, or bash's <(...))
// imports as the same file does. Open reads the first bytes (up to 64
// KiB, bufio's buffer) to tell the format; the pickle importer then
// opened the path again, and from a pipe got the bytes after them:
// "byte offset 0: unknown opcode 0x00", or a wait for a writer that was
// gone.
func TestOpenPickleFromFIFO(t *testing.T) {
	src := filepath.Join("testdata", "pytorch_cs336_silmont2000_mem_snapshot.pickle")
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.Greater(t, len(data), 64<<10, "the test wants a pickle longer than Open's first read")
	want, err := Open(src)
	require.NoError(t, err)
	defer want.Close()

	fifo := filepath.Join(t.TempDir(), "snap.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write(data)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
		wrote <- err
	}()
	got, err := Open(fifo)
	require.NoError(t, err)
	defer got.Close()
	require.NoError(t, <-wrote)
	require.Equal(t, FormatPyTorch, got.Format)
	require.Equal(t, want.Packed.Events.Len(), got.Packed.Events.Len())
	require.Equal(t, want.Packed.HasFinal, got.Packed.HasFinal)
	require.Equal(t, want.Packed.Final, got.Packed.Final)
	require.Equal(t, want.Packed.Stacks.NumStacks(), got.Packed.Stacks.NumStacks())
	require.Equal(t, want.Packed.Stacks.NumFrames(), got.Packed.Stacks.NumFrames())
	require.Equal(t, want.Packed.Header.AllocatorSettings, got.Packed.Header.AllocatorSettings)
}

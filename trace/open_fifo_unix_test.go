//go:build unix

package trace

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/internal/fifotest"
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

	fifo, wrote := fifotest.Feed(t, "snap.fifo", data)
	got, err := Open(fifo)
	require.NoError(t, err)
	defer got.Close()
	require.NoError(t, wrote())
	require.Equal(t, FormatPyTorch, got.Format)
	require.Equal(t, want.Packed.Events.Len(), got.Packed.Events.Len())
	require.Equal(t, want.Packed.HasFinal, got.Packed.HasFinal)
	require.Equal(t, want.Packed.Final, got.Packed.Final)
	require.Equal(t, want.Packed.Stacks.NumStacks(), got.Packed.Stacks.NumStacks())
	require.Equal(t, want.Packed.Stacks.NumFrames(), got.Packed.Stacks.NumFrames())
	require.Equal(t, want.Packed.Header.AllocatorSettings, got.Packed.Header.AllocatorSettings)
}

// A pipe is decoded as it comes, as a file is: what is not a pickle after
// its first two bytes fails at its first bad opcode, where the whole pipe
// used to be read first (an endless one, `(printf '\x80\x04'; cat
// /dev/zero)`, never ended); and a snapshot cut short reads as the same
// file cut at the same byte does, its FRAME named where a file's size
// names it.
func TestOpenPickleFromEndlessFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "zero.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	wrote := make(chan int64, 1)
	go func() {
		var n int64
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			buf := make([]byte, 64<<10)
			copy(buf, "\x80\x04")
			for n < 256<<20 { // the reader's close ends it (EPIPE); 256 MiB if not
				m, err := w.Write(buf)
				n += int64(m)
				if err != nil {
					break
				}
				buf[0], buf[1] = 0, 0
			}
			w.Close()
		}
		wrote <- n
	}()
	_, err := Open(fifo)
	require.EqualError(t, err, fifo+": byte offset 2: unknown opcode 0x00")
	require.Less(t, <-wrote, int64(64<<20), "the reader went on reading")

	src := filepath.Join("testdata", "pytorch_cs336_silmont2000_mem_snapshot.pickle")
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	for _, cut := range []int{100, 36085, len(data) - 1} {
		file := filepath.Join(t.TempDir(), "cut.pickle")
		require.NoError(t, os.WriteFile(file, data[:cut], 0o644))
		_, want := Open(file)
		require.Error(t, want)
		fifo, wrote := fifotest.Feed(t, "cut.fifo", data[:cut])
		_, got := Open(fifo)
		require.NoError(t, wrote())
		require.Error(t, got)
		require.Equal(t, strings.ReplaceAll(want.Error(), file, fifo), got.Error(), "cut at %d", cut)
	}
}

//go:build unix

package outfile_test

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/internal/outfile"
)

// The tests never name a real device: they make their own nodes in a
// temporary directory (a FIFO; a character device with /dev/full's numbers
// where this user may create one), so a writer that replaced its path
// would replace only the test's own node.

func write(path string, data string) error {
	f, err := outfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write([]byte(data)); err != nil {
		return err
	}
	return f.Commit()
}

func TestReplacesRegularFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o600))
	require.NoError(t, write(p, "new"))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "new", string(b))
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temporary file left")
}

// A FIFO is written through: the reader gets the bytes and the FIFO stays
// a FIFO (the rename replaced it with a regular file).
func TestWritesThroughFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pipe")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(p) // waits for the writer
		if err != nil {
			got <- "open: " + err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	require.NoError(t, outfile.Check(p), "Check opens no FIFO")
	require.NoError(t, write(p, "through the pipe"))
	st, err := os.Lstat(p)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, st.Mode().Type(), "the FIFO was replaced")
	select {
	case s := <-got:
		require.Equal(t, "through the pipe", s)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader got nothing")
	}
}

// fullDevice makes a character device with /dev/full's numbers (1, 7) in a
// temporary directory, or skips.
func fullDevice(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "full")
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|7); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("cannot open a device node here (nodev mount?): %v", err)
	}
	f.Close()
	return p
}

// A full device fails the write with ENOSPC and stays a device.
func TestDeviceFull(t *testing.T) {
	p := fullDevice(t)
	before, err := os.Lstat(p)
	require.NoError(t, err)
	err = write(p, "anything")
	require.ErrorIs(t, err, syscall.ENOSPC)
	st, err := os.Lstat(p)
	require.NoError(t, err)
	require.Equal(t, os.ModeDevice|os.ModeCharDevice, st.Mode().Type(), "the device was replaced")
	require.Equal(t, before.Mode(), st.Mode(), "its mode is left alone")
}

// A read-only file is refused, by its permission bits (the tests run as
// root, for whom access(2) allows anything), and stays as it was.
func TestRefusesReadOnlyFile(t *testing.T) {
	for _, mode := range []os.FileMode{0o444, 0o400, 0o000} {
		p := filepath.Join(t.TempDir(), "keep.txt")
		require.NoError(t, os.WriteFile(p, []byte("old"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		require.ErrorIs(t, outfile.Check(p), outfile.ErrReadOnly, "%v", mode)
		require.ErrorIs(t, write(p, "new"), outfile.ErrReadOnly, "%v", mode)
		require.NoError(t, os.Chmod(p, 0o600))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, "old", string(b), "%v", mode)
		ents, err := os.ReadDir(filepath.Dir(p))
		require.NoError(t, err)
		require.Len(t, ents, 1, "no temporary file left")
	}
}

func TestRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	require.ErrorIs(t, outfile.Check(dir), outfile.ErrIsDir)
	require.ErrorIs(t, write(dir, "x"), outfile.ErrIsDir)
}

// A failed write leaves neither a partial file nor a temporary one, and
// an old file as it was.
func TestAbortKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	f, err := outfile.Create(p)
	require.NoError(t, err)
	_, err = f.Write([]byte("half"))
	require.NoError(t, err)
	f.Abort()
	f.Abort()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "old", string(b))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Error(t, f.Commit(), "nothing to commit after Abort")
}

// A symbolic link is followed: its target gets the new bytes and the link
// stays a link, whether the target is in another directory, reached
// through a chain of relative links, or not there yet.
func TestFollowsSymlinks(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, "target.txt")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	link := filepath.Join(dir, "out.txt")
	require.NoError(t, os.Symlink(target, link))
	chain := filepath.Join(dir, "chain.txt")
	require.NoError(t, os.Symlink("out.txt", chain)) // relative, to the link
	dangling := filepath.Join(dir, "later.txt")
	require.NoError(t, os.Symlink("made-later.txt", dangling))

	isLink := func(p string) {
		st, err := os.Lstat(p)
		require.NoError(t, err)
		require.NotZero(t, st.Mode()&os.ModeSymlink, "%s is still a link", p)
	}
	require.NoError(t, outfile.Check(chain))
	require.NoError(t, write(chain, "new"))
	isLink(link)
	isLink(chain)
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "new", string(b))

	require.NoError(t, write(dangling, "fresh"))
	isLink(dangling)
	b, err = os.ReadFile(filepath.Join(dir, "made-later.txt"))
	require.NoError(t, err)
	require.Equal(t, "fresh", string(b))

	// A read-only target is refused through its link, as it is directly.
	require.NoError(t, os.Chmod(target, 0o444))
	require.ErrorIs(t, write(link, "newer"), outfile.ErrReadOnly)

	// A loop of links fails with the system's error, and creates nothing.
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink("loop", loop))
	require.Error(t, write(loop, "x"))
	isLink(loop)
}

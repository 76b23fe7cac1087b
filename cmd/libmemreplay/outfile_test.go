//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// write_trace and write_snapshot refuse a read-only file and leave it as it
// was, and write through a device, failing on a full one: they once
// replaced the machine's /dev/full with a regular file. The device is the
// test's own node with /dev/full's numbers.
func TestWritersKeepReadOnlyAndDevices(t *testing.T) {
	l, _ := newTestLib(t, "", func(o *options) { o.record = true; o.quiet = true })
	for _, w := range []struct {
		name  string
		write func(string) error
	}{{"write_trace", l.writeTrace}, {"write_snapshot", l.writeSnapshot}} {
		t.Run(w.name, func(t *testing.T) {
			dir := t.TempDir()
			ro := filepath.Join(dir, "keep")
			require.NoError(t, os.WriteFile(ro, []byte("old"), 0o444))
			err := w.write(ro)
			require.ErrorContains(t, err, "read-only")
			b, rerr := os.ReadFile(ro)
			require.NoError(t, rerr)
			require.Equal(t, "old", string(b))

			full := filepath.Join(dir, "full")
			if err := syscall.Mknod(full, syscall.S_IFCHR|0o666, 1<<8|7); err != nil {
				t.Skipf("cannot make a device node here: %v", err)
			}
			if f, err := os.OpenFile(full, os.O_WRONLY, 0); err != nil {
				t.Skipf("cannot open a device node here: %v", err)
			} else {
				f.Close()
			}
			require.ErrorIs(t, w.write(full), syscall.ENOSPC)
			st, err := os.Lstat(full)
			require.NoError(t, err)
			require.Equal(t, os.ModeDevice|os.ModeCharDevice, st.Mode().Type(), "the device was replaced")
		})
	}
}

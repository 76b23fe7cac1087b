//go:build unix

// Package fifotest makes FIFOs for tests of readers that must take their
// input from a pipe (/dev/stdin, bash's <(...)) as they take it from a
// file: the trace importer's and the CLI's.
package fifotest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Feed makes a FIFO named name in a temporary directory and writes data
// into it, then closes it, once a reader opens it. wrote waits for the
// writer and returns its error.
func Feed(t testing.TB, name string, data []byte) (path string, wrote func() error) {
	t.Helper()
	path = filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write(data)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	return path, func() error { return <-done }
}

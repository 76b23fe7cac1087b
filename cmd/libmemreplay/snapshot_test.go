package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// memreplay_write_snapshot spools the ring's events device by device; the
// file is, byte for byte, the pickle of the whole trace buildTrace takes
// (what it wrote before): two devices with markers (set_memory_fraction)
// and record_stream, and a ring that dropped its oldest events (an
// initial layout).
func TestWriteSnapshotIsTheTrace(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*options)
		body func(t *testing.T, l *library)
	}{
		{"two devices", func(o *options) { o.record = true }, func(t *testing.T, l *library) {
			testConcurrentBody(t, l)
			require.NoError(t, l.setMemoryFraction(0.5, 1))
		}},
		{"ring overflow", func(o *options) { o.record, o.maxEntries = true, 300 }, func(t *testing.T, l *library) {
			var live []uintptr
			for i := range 2000 {
				if len(live) < 5 || i%3 == 0 {
					p, err := l.malloc(uint64(i%7+1)<<20, 0, 0)
					require.NoError(t, err)
					live = append(live, p)
				} else {
					require.NoError(t, l.recordStream(live[0], 3))
					require.NoError(t, l.free(live[0]))
					live = live[1:]
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newTestLib(t, "", c.edit)
			c.body(t, l)
			tr, err := l.buildTrace(true)
			require.NoError(t, err)
			require.NotEmpty(t, tr.Events)
			var want bytes.Buffer
			require.NoError(t, trace.WritePyTorch(&want, tr))

			dir := t.TempDir()
			path := filepath.Join(dir, "snap.pickle")
			require.NoError(t, l.writeSnapshot(path))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want.Bytes(), got), "write_snapshot differs from the pickle of buildTrace's trace")
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, ents, 1, "no spool file left")
		})
	}
}

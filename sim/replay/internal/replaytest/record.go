package replaytest

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// TrialTrace reads a native trace (a generated trial's, in traces/trial)
// whole.
func TrialTrace(t testing.TB, path string) *trace.Trace {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := trace.NewNativeReader(f, path)
	require.NoError(t, err)
	tr, err := trace.ReadAll(r)
	require.NoError(t, err)
	return tr
}

// RecordPyTorch replays tr (prepared) with opts and a recorder that spools
// the PyTorch snapshot in a directory of its own, and returns the bytes.
func RecordPyTorch(t testing.TB, tr *trace.Trace, opts replay.Options) []byte {
	t.Helper()
	_, err := replay.Prepare(tr)
	require.NoError(t, err)
	dir := t.TempDir()
	var buf bytes.Buffer
	r := tr.NewReader()
	rr, err := replay.NewReplayRecorderPyTorch(&buf, dir, r, replay.ReplayRecordOptions{Name: "test"})
	require.NoError(t, err)
	opts.Recorder = rr
	_, err = replay.Run(r, opts)
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	require.Nil(t, rr.Trace())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no spool file left")
	return buf.Bytes()
}

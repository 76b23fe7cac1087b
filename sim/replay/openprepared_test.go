package replay_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// TestOpenPreparedMatchesPrepare: on every real snapshot, preparing the
// packed trace while it is imported (OpenPrepared) and after
// (PreparePacked), and preparing the unpacked Trace (Prepare), give the
// same initial state, header and reconstruction.
func TestOpenPreparedMatchesPrepare(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(sharedTraces, "*.pickle"))
	own, _ := filepath.Glob(filepath.Join(ownTraces, "*.pickle"))
	files = append(files, own...)
	if len(files) == 0 {
		t.Skip("no snapshots")
	}
	reconstructed := 0
	for _, f := range files {
		tr, err := trace.ReadPyTorchFile(f)
		require.NoError(t, err)
		want, err := replay.Prepare(tr)
		require.NoError(t, err)

		o, got, err := replay.OpenPrepared(f)
		require.NoError(t, err)
		require.NotNil(t, o.Packed)
		require.Equal(t, want, got, f)
		require.Equal(t, tr.Header, o.Packed.Header, f)
		require.Equal(t, tr.Initial, o.Packed.Initial, f)
		require.Equal(t, tr.InitialReconstructed, o.Packed.InitialReconstructed, f)
		require.NoError(t, o.Close())

		p, err := trace.ReadPyTorchPacked(f)
		require.NoError(t, err)
		got2, err := replay.PreparePacked(p)
		require.NoError(t, err)
		require.Equal(t, want, got2, f)
		require.Equal(t, tr.Initial, p.Initial, f)
		if got != nil {
			reconstructed++
		}
	}
	require.Greater(t, reconstructed, 3)
}

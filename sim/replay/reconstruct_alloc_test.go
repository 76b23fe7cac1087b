package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
)

// The reconstructed segments' blocks share one array but each is a slice
// of its own length: appending to a segment's blocks (as a caller editing
// the initial state may) never overwrites the next segment's.
func TestReconstructedBlocksDoNotAlias(t *testing.T) {
	tr := realTrace(t, "cs336_silmont2000_memory_forward_fp32_128.pickle")
	rec, err := replay.Prepare(tr)
	require.NoError(t, err)
	require.NotNil(t, rec)
	require.True(t, tr.InitialReconstructed)
	require.Greater(t, len(tr.Initial), 1)
	for i, s := range tr.Initial {
		require.NotEmpty(t, s.Blocks, "segment %d", i)
		require.Equal(t, len(s.Blocks), cap(s.Blocks), "segment %d", i)
	}
}

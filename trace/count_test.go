package trace

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// The count is the number of events the import makes, on the real
// snapshots (PyTorch's Python and C++ picklers' layouts) and on what
// memreplay's writer writes, read in one piece or a byte at a time.
func TestCountPyTorchEntries(t *testing.T) {
	for _, path := range ptSnapshotFiles(t) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		p, err := ReadPyTorchPacked(path)
		require.NoError(t, err)
		n, ok := CountPyTorchEntries(bytes.NewReader(data))
		require.True(t, ok, path)
		require.Equal(t, p.Events.Len(), n, path)
		if len(data) < 1<<20 {
			n, ok = CountPyTorchEntries(iotest.OneByteReader(bytes.NewReader(data)))
			require.True(t, ok, path)
			require.Equal(t, p.Events.Len(), n, "%s, a byte at a time", path)
		}
	}
	for seed := uint64(0); seed < 100; seed++ {
		tr := ptRandomTrace(rand.New(rand.NewPCG(seed, 9)))
		data := ptWrite(t, tr)
		back, err := ReadPyTorch(bytes.NewReader(data), "x")
		require.NoError(t, err)
		n, ok := CountPyTorchEntries(bytes.NewReader(data))
		require.True(t, ok, "seed %d", seed)
		require.Equal(t, int64(len(back.Events)), n, "seed %d", seed)
	}
}

// Input it cannot follow (truncated, an opcode PyTorch's snapshots never
// hold, not a pickle) gives no count rather than a wrong one or a panic.
func TestCountPyTorchEntriesUnknown(t *testing.T) {
	data, err := os.ReadFile(testdataSnapshot)
	require.NoError(t, err)
	for _, bad := range [][]byte{nil, {0x80}, data[:len(data)/2], data[:len(data)-1], []byte("not a pickle"),
		{0x80, 2, 'c', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm', '\n', '.'}} {
		_, ok := CountPyTorchEntries(bytes.NewReader(bad))
		require.False(t, ok, "%q", bad[:min(len(bad), 20)])
	}
	for i := 0; i < 2000; i++ {
		junk := append([]byte(nil), data...)
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		for k := 0; k < 1+rng.IntN(5); k++ {
			junk[rng.IntN(len(junk))] = byte(rng.IntN(256))
		}
		CountPyTorchEntries(bytes.NewReader(junk)) // no panic
	}
}

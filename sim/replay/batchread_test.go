package replay_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// oneByOne hides a reader's NextBatch: the replay then reads one event a
// call, as it does from readers that cannot batch.
type oneByOne struct{ trace.Reader }

// TestBatchReadingReplaysTheSame replays the same traces through a
// BatchReader and one event at a time: the results must be identical. The
// PyTorch training trace looks far ahead (empty_cache inference, frees
// completed by a synchronisation), the StopAfter cases end mid-batch, and
// the cut native trace ends in a read error after the events before it.
func TestBatchReadingReplaysTheSame(t *testing.T) {
	tr := realTrace(t, "cs336_wedsonlin_medium_128_training.pickle")
	_, err := replay.Prepare(tr)
	require.NoError(t, err)
	for _, stop := range []int64{0, 1, 127, 128, 129, 5000} {
		opts := replay.Options{Check: true, StopAfter: stop}
		want, err := replay.Run(oneByOne{tr.NewReader()}, opts)
		require.NoError(t, err)
		got, err := replay.Run(tr.NewReader(), opts)
		require.NoError(t, err)
		if stop == 0 {
			require.True(t, got.Check.Passed())
		}
		require.True(t, reflect.DeepEqual(want, got), "StopAfter %d: results differ", stop)
	}

	path := filepath.Join(t.TempDir(), "train.mrt")
	writeTrainingTrace(t, path, 50_000)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.mrt")
	require.NoError(t, os.WriteFile(cut, data[:len(data)*2/3], 0o644))
	for _, p := range []string{path, cut} {
		run := func(wrap bool) (*replay.Result, error) {
			f, err := os.Open(p)
			require.NoError(t, err)
			defer f.Close()
			r, err := trace.NewNativeReader(f, p)
			require.NoError(t, err)
			if wrap {
				r = oneByOne{r}
			}
			return replay.Run(r, replay.Options{})
		}
		want, wantErr := run(true)
		got, gotErr := run(false)
		if p == cut {
			require.Error(t, wantErr)
			require.Equal(t, wantErr.Error(), gotErr.Error())
			require.Greater(t, got.Events, int64(1000))
		} else {
			require.NoError(t, wantErr)
			require.NoError(t, gotErr)
		}
		require.True(t, reflect.DeepEqual(want, got), "%s: results differ", p)
	}
}

package replay_test

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// Recording the replay of a native trace, whose annotations come only
// after its events, keeps a quarter of a byte an input to place them, not
// an entry at each free: the bytes allocated grow by less than two bytes
// an event between a trace and one four times as long (1.2 measured; an
// entry of 24 bytes at every free_requested and free_completed, as
// before, made 90, and 1.2 GB of memory for a 25-million-event
// recording; 0.2 before annotations were carried over at all).
func TestRecordNativeInputMemoryFlat(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	dir := t.TempDir()
	bytesFor := func(n int) (allocated uint64, events int64) {
		path := filepath.Join(dir, "t.mrt")
		writeTrainingTrace(t, path, n)
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		r, err := trace.NewNativeReader(f, path)
		require.NoError(t, err)
		rr := replay.NewReplayRecorderTo(io.Discard, r, replay.ReplayRecordOptions{Name: "test"})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		res, err := replay.Run(r, replay.Options{Recorder: rr})
		require.NoError(t, err)
		require.NoError(t, rr.Finish())
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, res.Events
	}
	small, ns := bytesFor(50_000)
	large, nl := bytesFor(200_000)
	perEvent := float64(int64(large)-int64(small)) / float64(nl-ns)
	t.Logf("%d events: %d bytes; %d events: %d bytes; %.2f bytes an event more", ns, small, nl, large, perEvent)
	require.Less(t, perEvent, 2.0)
}

package replay_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A multi-stream trace under expandable_segments:True reserves 1.125 x the
// device per (stream, pool): 24 reservations of 1.125 TiB on the default
// 1 TiB device. A GPU's address space holds them (it used to stop with
// "cuMemAddressReserve failed: CUDA_ERROR_OUT_OF_MEMORY" at the 15th).
func TestExpandableManyStreamsOnDefaultDevice(t *testing.T) {
	var events []trace.Event
	addr := uint64(0x7f0000000000)
	for s := uint64(1); s <= 12; s++ {
		for _, size := range []uint64{1024, 10 << 20} {
			events = append(events, trace.Event{Action: trace.ActionAlloc, Addr: addr, Size: size, Stream: s})
			addr += 1 << 30
		}
	}
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay"}, Stacks: trace.NewStacks(), Events: events}
	cfg := mustParse(t, "expandable_segments:True")
	res, err := replay.RunTrace(tr, replay.Options{Config: &cfg})
	require.NoError(t, err)
	require.Empty(t, res.OOMs)
	require.Len(t, res.Devices[0].Final.Segments, 24, "one mapped run per (stream, pool)")
}

// Every real snapshot replays under expandable_segments:True on the
// default device without an error.
func TestRealTracesReplayWithExpandableSegments(t *testing.T) {
	var files []string
	for _, dir := range []string{ownTraces, sharedTraces} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no real traces in traces/pytorch or ../shared/traces/pytorch")
	}
	cfg := mustParse(t, "expandable_segments:True")
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), ".") {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			tr, err := trace.ReadPyTorchFile(f)
			require.NoError(t, err)
			c := cfg
			res, err := replay.RunTrace(tr, replay.Options{Config: &c})
			require.NoError(t, err)
			require.False(t, res.Stopped)
		})
	}
}

package replay_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A header naming 60,000 devices that nothing uses makes no allocator for
// them (each used to cost tens of KB: over 2 GiB in all); they are still
// reported, empty, with a fresh allocator's statistics.
func TestNamedDevicesCostNothing(t *testing.T) {
	h := trace.Header{Source: "memreplay", SourceFile: "devices.mrt"}
	for i := range 60000 {
		h.Devices = append(h.Devices, trace.Device{Index: int32(i)})
	}
	tr := &trace.Trace{Header: h, Stacks: trace.NewStacks(), Events: []trace.Event{ev(trace.ActionAlloc, 0x1000, 512)}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := replay.RunTrace(tr, replay.Options{})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<20), "bytes allocated for 60,000 empty devices")
	require.Len(t, res.Devices, 60000)
	require.EqualValues(t, 512, res.Devices[0].Stats.AllocatedBytes[0].Current)
	for _, i := range []int{1, 59999} {
		d := res.Devices[i]
		require.EqualValues(t, i, d.Index)
		require.Equal(t, replay.UnknownCapacity, d.Capacity)
		require.Zero(t, d.Stats.AllocatedBytes[0].Peak)
		require.Equal(t, int64(-1), d.Stats.MaxSplitSize, "a fresh allocator's statistics")
	}
}

// Frees on many streams leave one cached segment per stream; the
// out-of-memory that follows releases them all. Each release used to move
// every later segment's address mapping (quadratic), and each timeline
// sample walked one free-set bucket per stream.
func BenchmarkDistinctStreams(b *testing.B) {
	const n = 20000
	var events []trace.Event
	for i := range uint64(n) {
		a := 0x7f0000000000 + i<<21
		events = append(events, trace.Event{Action: trace.ActionAlloc, Addr: a, Size: 512, Stream: i + 1},
			trace.Event{Action: trace.ActionFreeRequested, Addr: a, Size: 512, Stream: i + 1},
			trace.Event{Action: trace.ActionFreeCompleted, Addr: a, Size: 512, Stream: i + 1})
	}
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay"}, Stacks: trace.NewStacks(), Events: events}
	for b.Loop() {
		// Room for half the segments: the cache is released once.
		res, err := replay.RunTrace(tr, replay.Options{Capacity: n / 2 << 21})
		if err != nil || res.Stopped {
			b.Fatal(err, res.Stopped)
		}
	}
}

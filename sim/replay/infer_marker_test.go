package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A ≈2.4 user_defined marker (a record_function range's end, recorded by
// another thread) between a malloc's release of the cache and its new
// segment is not an allocator call: the releases are still the malloc's
// (a retry), as without the marker, not an inferred empty_cache.
func TestInferEmptyCacheStepsOverMarkers(t *testing.T) {
	const segY = uint64(0x7f3000000000)
	st := trace.NewStacks()
	mark := trace.Event{Action: trace.ActionMarker, Label: "fwd", Stack: st.Intern([]trace.Frame{{Filename: "fwd", Name: "END"}})}
	events := []trace.Event{
		ev(trace.ActionSegmentAlloc, segX, 20*mib),
		ev(trace.ActionAlloc, segX, 20*mib),
		ev(trace.ActionFreeRequested, segX, 20*mib),
		ev(trace.ActionFreeCompleted, segX, 20*mib),
		ev(trace.ActionSegmentFree, segX, 20*mib), // the malloc below finds no room: release_cached_blocks
		mark,
		ev(trace.ActionSegmentAlloc, segY, 40*mib), // and retries
		ev(trace.ActionAlloc, segY, 40*mib),
	}
	run := func(evs []trace.Event) *replay.Result {
		tr := &trace.Trace{Header: trace.Header{Source: replay.SourcePyTorch}, Stacks: st, Events: evs}
		res, err := replay.RunTrace(tr, replay.Options{Check: true, Capacity: 50 * mib})
		require.NoError(t, err)
		require.Nil(t, res.Check.FirstDivergence)
		return res
	}
	without := run(append(append([]trace.Event{}, events[:5]...), events[6:]...))
	require.EqualValues(t, 1, without.Devices[0].Stats.NumAllocRetries)
	with := run(events)
	require.Equal(t, without.Devices[0].Stats, with.Devices[0].Stats)
}

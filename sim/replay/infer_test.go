package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// pytorchTrace builds a PyTorch-sourced trace (no explicit empty_cache or
// record_stream entries) from events.
func pytorchTrace(events ...trace.Event) *trace.Trace {
	return &trace.Trace{Header: trace.Header{Source: replay.SourcePyTorch}, Stacks: trace.NewStacks(), Events: events}
}

func ev(a trace.Action, addr, size uint64) trace.Event {
	return trace.Event{Action: a, Addr: addr, Size: size}
}

const (
	segX = uint64(0x7f1000000000)
	segS = uint64(0x7f2000000000)
)

func checkTrace(t *testing.T, tr *trace.Trace) *replay.Result {
	t.Helper()
	res, err := replay.RunTrace(tr, replay.Options{Check: true, InvariantChecks: true})
	require.NoError(t, err)
	require.Nil(t, res.Check.FirstDivergence)
	require.Equal(t, res.Check.DecisionsExpected, res.Check.DecisionsMatched)
	return res
}

// Releases followed by a free are torch.cuda.empty_cache(): PyTorch does
// not record the call, only its segment_free entries.
func TestInferEmptyCache(t *testing.T) {
	res := checkTrace(t, pytorchTrace(
		ev(trace.ActionSegmentAlloc, segX, 20*mib),
		ev(trace.ActionAlloc, segX, 20*mib),
		ev(trace.ActionSegmentAlloc, segS, 2*mib),
		ev(trace.ActionAlloc, segS, 1000),
		ev(trace.ActionFreeRequested, segX, 20*mib),
		ev(trace.ActionFreeCompleted, segX, 20*mib),
		ev(trace.ActionSegmentFree, segX, 20*mib), // empty_cache: the small segment is in use
		ev(trace.ActionFreeRequested, segS, 1000),
		ev(trace.ActionFreeCompleted, segS, 1000),
	))
	st := res.Devices[0].Stats
	require.EqualValues(t, 1, st.NumDeviceFree)
	require.Zero(t, st.NumAllocRetries, "an inferred empty_cache is not a malloc retry")
	require.EqualValues(t, 2*mib, st.ReservedBytes[0].Current)
}

// A block freed after record_stream completes either when a malloc's
// process_events finds its event done, or in the synchronisation of
// malloc's last resort. Here a free_completed followed by the release of
// its own segment and an oom can only be the synchronisation: had
// process_events returned the block first, it would have served the
// request.
func TestInferSynchronisedFree(t *testing.T) {
	res := checkTrace(t, pytorchTrace(
		ev(trace.ActionSegmentAlloc, segX, 20*mib),
		ev(trace.ActionAlloc, segX, 20*mib),
		ev(trace.ActionFreeRequested, segX, 20*mib), // waits on another stream
		ev(trace.ActionFreeCompleted, segX, 20*mib), // synchronize_and_free_events
		ev(trace.ActionSegmentFree, segX, 20*mib),   // release_cached_blocks
		trace.Event{Action: trace.ActionOOM, Size: 20 * mib, DeviceFree: 10 * mib},
	))
	st := res.Devices[0].Stats
	require.EqualValues(t, 1, st.NumOOMs)
	require.EqualValues(t, 1, st.NumAllocRetries)
	require.Len(t, res.OOMs, 1)
	require.True(t, res.OOMs[0].Recorded)
}

// The same free_completed followed by a new segment came from
// process_events: the block it returned was too small for the request, so
// the malloc went to the device.
func TestInferProcessEventsFree(t *testing.T) {
	const segY = uint64(0x7f3000000000)
	res := checkTrace(t, pytorchTrace(
		ev(trace.ActionSegmentAlloc, segX, 20*mib),
		ev(trace.ActionAlloc, segX, 20*mib),
		ev(trace.ActionFreeRequested, segX, 20*mib),
		ev(trace.ActionFreeCompleted, segX, 20*mib), // process_events
		ev(trace.ActionSegmentAlloc, segY, 40*mib),
		ev(trace.ActionAlloc, segY, 40*mib),
	))
	st := res.Devices[0].Stats
	require.Zero(t, st.NumAllocRetries)
	require.EqualValues(t, 60*mib, st.ReservedBytes[0].Current)
}

package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A free of an address the trace never allocated, and that no segment the
// trace or its final state knows explains, is bad input: an error naming
// the event, or under Lenient the free and its completion skipped and
// counted. It used to become a phantom block live before the trace.
func TestFreeOfNeverAllocatedAddress(t *testing.T) {
	events := []trace.Event{
		ev(trace.ActionAlloc, 0x100, 16),
		ev(trace.ActionFreeRequested, 0x900, 16),
		ev(trace.ActionFreeCompleted, 0x900, 16),
		ev(trace.ActionFreeRequested, 0x100, 16),
		ev(trace.ActionFreeCompleted, 0x100, 16),
	}
	// An RMM log (no segments at all) and a snapshot whose final state
	// holds a segment elsewhere.
	final := []trace.Segment{{Address: 0x7f0000000000, TotalSize: 2 << 20, Pool: "small",
		Blocks: []trace.Block{{Address: 0x7f0000000000, Size: 2 << 20}}}}
	for _, src := range []string{trace.SourceRMM, replay.SourcePyTorch} {
		t.Run(src, func(t *testing.T) {
			mk := func() *trace.Trace {
				tr := &trace.Trace{Header: trace.Header{Source: src, SourceFile: "bad"}, Stacks: trace.NewStacks(),
					Events: append([]trace.Event(nil), events...)}
				if src == replay.SourcePyTorch {
					tr.Final, tr.HasFinal = final, true
				}
				return tr
			}
			_, err := replay.RunTrace(mk(), replay.Options{})
			require.EqualError(t, err, "bad: event 1: free of unknown address 0x900")
			res, err := replay.RunTrace(mk(), replay.Options{Lenient: true})
			require.NoError(t, err)
			require.EqualValues(t, 2, res.Skipped, "the free and its completion")
			require.EqualValues(t, 1, res.UnknownFrees)
			require.Equal(t, []string{"event 1: free of unknown address 0x900"}, res.Problems)
			require.EqualValues(t, 512, res.Devices[0].Stats.AllocatedBytes[0].Peak, "no phantom block live beside 0x100")
		})
	}
}

// Frees the state before the trace explains still replay: a block of a
// segment in the final state, of a segment the trace frees without having
// allocated it, and of an expandable run (which cannot be restored and
// gets a segment of its own).
func TestFreeExplainedByInitialState(t *testing.T) {
	const seg, gone, run = 0x7f0000000000, 0x7f1000000000, 0x7f2000000000
	tr := &trace.Trace{Header: trace.Header{Source: replay.SourcePyTorch, SourceFile: "partial"}, Stacks: trace.NewStacks(),
		Events: []trace.Event{
			ev(trace.ActionFreeRequested, seg, 1<<20),
			ev(trace.ActionFreeCompleted, seg, 1<<20),
			ev(trace.ActionFreeRequested, gone, 4<<20),
			ev(trace.ActionFreeCompleted, gone, 4<<20),
			{Action: trace.ActionSegmentFree, Addr: gone, Size: 20 << 20},
			ev(trace.ActionFreeRequested, run, 2<<20),
			ev(trace.ActionFreeCompleted, run, 2<<20),
		},
		Final: []trace.Segment{
			{Address: seg, TotalSize: 20 << 20, Pool: "large", Blocks: []trace.Block{{Address: seg, Size: 20 << 20}}},
			{Address: run, TotalSize: 2 << 20, Pool: "large", Expandable: true, Blocks: []trace.Block{{Address: run, Size: 2 << 20}}},
		},
		HasFinal: true,
	}
	rec, err := replay.Prepare(tr)
	require.NoError(t, err)
	require.Equal(t, 1, rec.Unresolved, "the block of the expandable run")
	res, err := replay.Run(tr.NewReader(), replay.Options{})
	require.NoError(t, err)
	require.Zero(t, res.Skipped)
	require.Zero(t, res.UnknownFrees)
}

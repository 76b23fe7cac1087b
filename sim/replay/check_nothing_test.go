package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A check needs recorded decisions, or an end state that alloc addresses
// lead to; otherwise it has nothing to compare and neither passes nor
// fails.
func TestCheckNothingToCheck(t *testing.T) {
	allocs := []trace.Event{
		ev(trace.ActionAlloc, 0x1000, 10),
		ev(trace.ActionFreeRequested, 0x1000, 10),
		ev(trace.ActionFreeCompleted, 0x1000, 10),
	}
	withOOM := append(append([]trace.Event(nil), allocs...), trace.Event{Action: trace.ActionOOM, Size: 1 << 40})
	cases := []struct {
		name, source string
		events       []trace.Event
		nothing      bool
	}{
		{"generated allocs", "memreplay", allocs, true},
		{"no events", replay.SourcePyTorch, nil, true},
		{"rmm oom", trace.SourceRMM, withOOM, true},
		{"recorded oom", "memreplay", withOOM, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &trace.Trace{Header: trace.Header{Source: c.source}, Stacks: trace.NewStacks(), Events: c.events}
			res, err := replay.RunTrace(tr, replay.Options{Check: true})
			require.NoError(t, err)
			ch := res.Check
			require.Equal(t, c.nothing, ch.NothingToCheck)
			if c.nothing {
				require.False(t, ch.Passed())
				require.Zero(t, ch.DecisionsExpected)
				require.Nil(t, ch.FirstDivergence)
			} else {
				// The trace has no segment_alloc: the check fails, as it
				// should, rather than saying nothing.
				require.Positive(t, ch.DecisionsExpected)
				require.NotNil(t, ch.FirstDivergence)
			}
		})
	}
	require.True(t, replay.Checkable("memreplay", 0, 3, 1), "alloc addresses against an end state")
	require.False(t, replay.Checkable("memreplay", 0, 0, 1), "an end state alone")
	require.False(t, replay.Checkable(replay.SourcePyTorch, 0, 3, 0), "alloc addresses and an empty end state: none recorded")
	require.False(t, replay.Checkable(trace.SourceRMM, 1, 3, 0))
}

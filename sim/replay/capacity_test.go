package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// oomTrace records a 20 MiB segment, then an oom with 2 MiB free on the
// device: 22 MiB implied.
func oomTrace() *trace.Trace {
	return &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "oom.mrt"}, Stacks: trace.NewStacks(),
		Events: []trace.Event{
			{Action: trace.ActionSegmentAlloc, Addr: 0x7f0000000000, Size: 20 * mib},
			{Action: trace.ActionAlloc, Addr: 0x7f0000000000, Size: 20 * mib},
			{Action: trace.ActionOOM, Size: 4 * mib, DeviceFree: 2 * mib},
		}}
}

// One rule for the capacity: --capacity, else the trace's recorded one,
// else the one its oom entries imply, except under --check (which fails
// where the recording failed), else not limited. Under --check the
// implied figure is named as unused, never noted as the capacity.
func TestCapacityRuleImpliedAndCheck(t *testing.T) {
	tr := oomTrace()
	res, err := replay.RunTrace(tr, replay.Options{})
	require.NoError(t, err)
	d := res.Devices[0]
	require.EqualValues(t, 22*mib, d.Capacity)
	require.Equal(t, "implied by the oom at event 2", d.CapacitySource)
	require.Empty(t, d.UnusedCapacity)
	require.Empty(t, tr.Header.Notes, "the capacity is said by the device's source, not by a note of its own")

	res, err = replay.RunTrace(oomTrace(), replay.Options{Check: true})
	require.NoError(t, err)
	d = res.Devices[0]
	require.Equal(t, replay.UnknownCapacity, d.Capacity)
	require.Equal(t, replay.SourceUnknown, d.CapacitySource)
	require.Equal(t, "22.00 MiB implied by the oom at event 2", d.UnusedCapacity)
	require.True(t, res.Check.Passed(), "%v", res.Check.FirstDivergence)

	res, err = replay.RunTrace(oomTrace(), replay.Options{Check: true, Capacity: 64 * mib})
	require.NoError(t, err)
	require.Equal(t, "option", res.Devices[0].CapacitySource)
	require.Empty(t, res.Devices[0].UnusedCapacity)
}

// An oom that records no free bytes (RMM logs) implies no capacity.
func TestImpliedCapacityNeedsFreeBytes(t *testing.T) {
	tr := &trace.Trace{Header: trace.Header{Source: trace.SourceRMM}, Stacks: trace.NewStacks(),
		Events: []trace.Event{{Action: trace.ActionOOM, Size: 1 << 40}}}
	require.Empty(t, replay.ImpliedCapacity(tr))
	require.Empty(t, tr.Header.Devices)
}

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

// limitTrace reserves 22 MiB, then runs out asking for 4 MiB (a 20 MiB
// segment) while the device has free bytes: free of them at the oom.
func limitTrace(free uint64) *trace.Trace {
	return &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "limit.mrt"}, Stacks: trace.NewStacks(),
		Events: []trace.Event{
			{Action: trace.ActionSegmentAlloc, Addr: 0x7f0000000000, Size: 20 * mib},
			{Action: trace.ActionAlloc, Addr: 0x7f0000000000, Size: 20 * mib},
			{Action: trace.ActionSegmentAlloc, Addr: 0x7f0001400000, Size: 2 * mib},
			{Action: trace.ActionAlloc, Addr: 0x7f0001400000, Size: 2 * mib},
			{Action: trace.ActionOOM, Size: 4 * mib, DeviceFree: free},
		}}
}

// An oom at which the device had room for the segment asked for came from
// a limit (a memory fraction): the capacity is the roundest figure between
// the trace's peak (22 MiB) and what the oom held plus its segment
// (42 MiB), and the plain replay runs out where the recording did. With
// the device's own size (1 GiB + 22 MiB, the rule before) it ran out
// nowhere.
func TestImpliedLimitOfARoomyOOM(t *testing.T) {
	tr := limitTrace(1 << 30)
	res, err := replay.RunTrace(tr, replay.Options{})
	require.NoError(t, err)
	d := res.Devices[0]
	require.EqualValues(t, 32*mib, d.Capacity)
	require.Equal(t, "a limit implied by the oom at event 4, where the device had 1024.00 MiB free", d.CapacitySource)
	require.Len(t, res.OOMs, 1)

	// The device itself full (19 MiB free < the 20 MiB segment): its size.
	res, err = replay.RunTrace(limitTrace(19*mib), replay.Options{})
	require.NoError(t, err)
	require.EqualValues(t, 41*mib, res.Devices[0].Capacity)
	require.Equal(t, "implied by the oom at event 4", res.Devices[0].CapacitySource)

	// A peak at or over the bound: the limit changed during the trace, and
	// the device's size is the one figure left.
	tr = limitTrace(1 << 30)
	tr.Events = append(tr.Events[:4:4], trace.Event{Action: trace.ActionSegmentAlloc, Addr: 0x7f0001600000, Size: 40 * mib},
		trace.Event{Action: trace.ActionSegmentFree, Addr: 0x7f0001600000, Size: 40 * mib}, tr.Events[4])
	res, err = replay.RunTrace(tr, replay.Options{})
	require.NoError(t, err)
	require.EqualValues(t, (1<<30)+22*mib, res.Devices[0].Capacity)
	require.Equal(t, "implied by the oom at event 6", res.Devices[0].CapacitySource)
}

// The BERT-base trial recorded on an H200 limited to 24 GiB
// (set_per_process_memory_fraction; traces/recorded) runs out in a plain
// replay where it did on the GPU, after the same two retries: the limit is
// found from its oom, where the device still had 115 GiB free.
func TestRecordedLimitedTrialRunsOutAsRecorded(t *testing.T) {
	o, err := trace.Open("../../traces/recorded/bert-base_b128_s512_fp16_24GiB.pickle")
	require.NoError(t, err)
	defer o.Close()
	_, err = replay.PrepareOpened(o)
	require.NoError(t, err)
	res, err := replay.Run(o.Reader, replay.Options{})
	require.NoError(t, err)
	d := res.Devices[0]
	require.EqualValues(t, 24<<30, d.Capacity, d.CapacitySource)
	require.Contains(t, d.CapacitySource, "a limit implied by the oom at event 1116")
	require.Len(t, res.OOMs, 1)
	require.EqualValues(t, 2, d.Stats.NumAllocRetries)
}

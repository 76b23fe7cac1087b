package replay_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/trace"
)

// Two devices recorded into one trace, their events interleaved: each is
// replayed by its own allocator and the check counts are summed.
func TestReplayTwoDevices(t *testing.T) {
	tr, stats := replaytest.RecordTwoDevices(t)
	res, err := replay.RunTrace(tr, replay.Options{Check: true, InvariantChecks: true})
	require.NoError(t, err)
	require.Len(t, res.Devices, 2)
	require.True(t, res.Check.Passed(), "%v %s", res.Check.FirstDivergence, res.Check.FinalDifference)
	var allocsSeen int64
	for _, e := range tr.Events {
		if e.Action == trace.ActionAlloc || e.Action.IsDecision() {
			allocsSeen++
		}
	}
	require.Equal(t, allocsSeen, res.Check.DecisionsExpected)
	for d := range stats {
		require.Equal(t, stats[d].ReservedBytes, res.Devices[d].Stats.ReservedBytes)
		require.Equal(t, int32(d), res.Devices[d].Index)
	}
}

// Bad input is an error naming the event, or under Lenient a count.
func TestReplayBadInput(t *testing.T) {
	cases := []struct {
		name   string
		events []trace.Event
		msg    string
	}{
		{"free of unknown address", []trace.Event{ev(trace.ActionFreeRequested, 0x1000, 10)}, "event 0: free of unknown address 0x1000"},
		{"double free", []trace.Event{ev(trace.ActionAlloc, 0x1000, 10), {Action: trace.ActionRecordStream, Addr: 0x1000, Stream: 3},
			ev(trace.ActionFreeRequested, 0x1000, 10), ev(trace.ActionFreeRequested, 0x1000, 10)}, "event 3: double free of 0x1000 (freed before, not yet completed)"},
		{"double alloc", []trace.Event{ev(trace.ActionAlloc, 0x1000, 10), ev(trace.ActionAlloc, 0x1000, 10)}, "event 1: alloc at 0x1000, which is live since event 0"},
		{"zero alloc", []trace.Event{ev(trace.ActionAlloc, 0x1000, 0)}, "event 0: alloc of 0 bytes"},
		{"unknown completion", []trace.Event{ev(trace.ActionFreeCompleted, 0x2000, 10)}, "event 0: free_completed of unknown address 0x2000"},
		{"negative device", []trace.Event{{Action: trace.ActionAlloc, Device: -7, Addr: 0x1000, Size: 10}}, "event 0: device -7 out of range (0 to 65536)"},
		{"device too large", []trace.Event{{Action: trace.ActionMarker, Device: 99999}}, "event 0: device 99999 out of range (0 to 65536)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "t.mrt"}, Stacks: trace.NewStacks(), Events: c.events}
			_, err := replay.Run(tr.NewReader(), replay.Options{})
			var fe *trace.FormatError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "t.mrt: "+c.msg, err.Error())
			res, err := replay.Run(tr.NewReader(), replay.Options{Lenient: true})
			require.NoError(t, err)
			require.EqualValues(t, 1, res.Skipped)
			require.Len(t, res.Problems, 1)
		})
	}
}

// A header naming an out-of-range device (an RMM log named log.dev99999.csv)
// is an error; under Lenient every event on it is counted as skipped, with
// or without a recorder watching (report, compare).
func TestReplayDeviceOutOfRangeLenient(t *testing.T) {
	events := []trace.Event{
		{Action: trace.ActionAlloc, Device: 99999, Addr: 0x1000, Size: 10},
		{Action: trace.ActionFreeRequested, Device: 99999, Addr: 0x1000, Size: 10},
		{Action: trace.ActionFreeCompleted, Device: 99999, Addr: 0x1000, Size: 10},
	}
	tr := &trace.Trace{Header: trace.Header{Source: "rmm", SourceFile: "log.dev99999.csv", Devices: []trace.Device{{Index: 99999}}},
		Stacks: trace.NewStacks(), Events: events}
	_, err := replay.RunTrace(tr, replay.Options{})
	require.EqualError(t, err, "log.dev99999.csv: device 99999 out of range (0 to 65536)")
	for _, check := range []bool{false, true} {
		res, err := replay.RunTrace(tr, replay.Options{Lenient: true, Check: check})
		require.NoError(t, err)
		require.EqualValues(t, 3, res.Skipped)
		require.Len(t, res.Problems, 3)
		require.Empty(t, res.Devices)
	}
}

// A trace may use at most replay.MaxDevices devices: each gets an
// allocator and profiler state of about 80 KB, so a snapshot repeating one
// memoized device trace 65,537 times (a few hundred KB) took gigabytes.
// The first event on one device more is the error; under Lenient, each
// event on it is skipped and counted.
func TestReplayBoundsDevicesInUse(t *testing.T) {
	var events []trace.Event
	for d := int32(0); d <= replay.MaxDevices; d++ {
		events = append(events, trace.Event{Action: trace.ActionAlloc, Device: d, Addr: 0x1000, Size: 10},
			trace.Event{Action: trace.ActionFreeRequested, Device: d, Addr: 0x1000, Size: 10})
	}
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "t.mrt"}, Stacks: trace.NewStacks(), Events: events}
	_, err := replay.RunTrace(tr, replay.Options{})
	require.EqualError(t, err, "t.mrt: event 2048: device 1024: more than 1024 devices in use")
	res, err := replay.RunTrace(tr, replay.Options{Lenient: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Skipped)
	require.Len(t, res.Devices, replay.MaxDevices)

	// Devices that are only named cost nothing and do not count.
	tr.Events = events[:2]
	for d := int32(0); d <= 2*replay.MaxDevices; d++ {
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: d})
	}
	_, err = replay.RunTrace(tr, replay.Options{})
	require.NoError(t, err)
}

// OOM policies on a device too small for the trace.
func TestReplayOOMPolicies(t *testing.T) {
	events := []trace.Event{
		{Action: trace.ActionTrialStart, Label: "t1"},
		ev(trace.ActionAlloc, 0x1000, 30*mib),
		ev(trace.ActionAlloc, 0x2000, 30*mib), // does not fit in 40 MiB
		ev(trace.ActionFreeRequested, 0x2000, 30*mib),
		ev(trace.ActionFreeCompleted, 0x2000, 30*mib),
		ev(trace.ActionFreeRequested, 0x1000, 30*mib),
		ev(trace.ActionFreeCompleted, 0x1000, 30*mib),
		{Action: trace.ActionTrialEnd, Label: "t1"},
		{Action: trace.ActionTrialStart, Label: "t2"},
		ev(trace.ActionAlloc, 0x3000, 8*mib),
	}
	run := func(p replay.OOMPolicy) *replay.Result {
		tr := &trace.Trace{Header: trace.Header{Source: "memreplay"}, Stacks: trace.NewStacks(), Events: events}
		res, err := replay.Run(tr.NewReader(), replay.Options{Capacity: 40 * mib, OOM: p, InvariantChecks: true})
		require.NoError(t, err)
		require.Len(t, res.OOMs, 1)
		require.EqualValues(t, 2, res.OOMs[0].Index)
		require.False(t, res.OOMs[0].Recorded)
		return res
	}
	stop := run(replay.OOMStop)
	require.True(t, stop.Stopped)
	require.EqualValues(t, 2, stop.StoppedAt)

	skip := run(replay.OOMSkip)
	require.False(t, skip.Stopped)
	require.EqualValues(t, 3, skip.Skipped, "the alloc, its free_requested and its free_completed")
	require.EqualValues(t, 1, skip.Devices[0].Stats.Allocation[0].Current, "trial 2's block")

	drop := run(replay.OOMDropTrial)
	require.EqualValues(t, 1+4+1, drop.Skipped, "the alloc, the trial's four frees and its end")
	require.EqualValues(t, 1, drop.Devices[0].Stats.Allocation[0].Current, "trial 1 dropped, trial 2 runs")
}

// FuzzReplay feeds arbitrary event sequences to the replay: it must return
// a result or an error, never panic, with the allocator's invariants held.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{1, 0, 10, 2, 0, 10, 3, 0, 10})
	f.Add([]byte{1, 1, 200, 1, 2, 30, 8, 0, 90, 4, 9, 20, 2, 1, 200, 3, 1, 200, 10, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var events []trace.Event
		for len(data) >= 3 {
			e := trace.Event{Action: trace.Action(data[0] % 16), Addr: uint64(data[1]%8) << 12,
				Size: uint64(binary.LittleEndian.Uint16([]byte{data[2], data[1]})) << 10, Stream: uint64(data[0] >> 6)}
			if e.Action.IsDecision() {
				e.Addr = 0x7f0000000000 + uint64(data[1]%4)<<22
			}
			events = append(events, e)
			data = data[3:]
		}
		for _, src := range []string{"memreplay", replay.SourcePyTorch} {
			for _, lenient := range []bool{false, true} {
				tr := &trace.Trace{Header: trace.Header{Source: src}, Stacks: trace.NewStacks(), Events: events}
				_, _ = replay.RunTrace(tr, replay.Options{Lenient: lenient, Check: lenient, Capacity: 64 * mib,
					OOM: replay.OOMPolicy(len(events) % 3), InvariantChecks: true})
			}
		}
	})
}

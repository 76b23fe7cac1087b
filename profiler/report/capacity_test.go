package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A trace whose oom implies a capacity: without --check the report says
// the implied capacity once, as the capacity; under --check it says, once,
// that the replay does not use it. Never "not limited" beside "capacity
// 22.00 MiB implied".
func TestCapacitySaidOnce(t *testing.T) {
	mk := func() *trace.Trace {
		tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "oom.mrt"}, Stacks: trace.NewStacks(),
			Events: []trace.Event{
				{Action: trace.ActionSegmentAlloc, Addr: 0x7f0000000000, Size: 20 * MiB},
				{Action: trace.ActionAlloc, Addr: 0x7f0000000000, Size: 20 * MiB},
				{Action: trace.ActionOOM, Size: 4 * MiB, DeviceFree: 2 * MiB},
			}}
		_, err := replay.Prepare(tr)
		require.NoError(t, err)
		return tr
	}
	table := func(check bool) string {
		var b bytes.Buffer
		require.NoError(t, report.WriteTable(&b, replayed(t, mk(), nil, check)))
		return b.String()
	}
	plain := table(false)
	require.Contains(t, plain, "22.00 MiB (implied by the oom at event 2)")
	require.NotContains(t, plain, "not limited")
	// The row and the device note agree (the note names the device).
	require.Equal(t, strings.Count(plain, "implied by the oom at event 2"), strings.Count(plain, "22.00 MiB"), plain)

	checked := table(true)
	require.Contains(t, checked, "not limited (--check uses no implied capacity; --capacity sets one)")
	require.Contains(t, checked, "--check does not use the 22.00 MiB implied by the oom at event 2")
	require.Equal(t, 1, strings.Count(checked, "implied by the oom at event 2"), checked)
}

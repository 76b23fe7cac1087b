package replay_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// markerLog is a gated recorder that also wants the markers.
type markerLog struct {
	gatedLog
	markers []int64
	labels  []string
}

func (m *markerLog) Marker(device int32, index int64, e *trace.Event) {
	m.markers = append(m.markers, index)
	m.labels = append(m.labels, e.Label)
}

// TestMarkerRecorder: a MarkerRecorder is told of every marker at its
// index, though its Steps are gated off there, alone and beside another
// recorder (replay --record with the profiler); the replay's decisions are
// those of the trace without the markers.
func TestMarkerRecorder(t *testing.T) {
	events := []trace.Event{
		{Action: trace.ActionMarker, Label: "fwd", TimeUS: 1},
		{Action: trace.ActionAlloc, Addr: 0x7f0000000000, Size: 4096, TimeUS: 2},
		{Action: trace.ActionFreeRequested, Addr: 0x7f0000000000, Size: 4096, TimeUS: 3},
		{Action: trace.ActionFreeCompleted, Addr: 0x7f0000000000, Size: 4096, TimeUS: 3},
		{Action: trace.ActionMarker, Label: "fwd", TimeUS: 4},
	}
	run := func(rec replay.Recorder, evs []trace.Event) *replay.Result {
		tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: trace.NewStacks(), Events: evs}
		res, err := replay.RunTrace(tr, replay.Options{Recorder: rec})
		require.NoError(t, err)
		return res
	}
	never := func(int64) int64 { return 1 << 62 }
	alone := &markerLog{gatedLog: gatedLog{dueAfter: never}}
	withMarkers := run(alone, events)
	assert.Equal(t, []int64{0, 4}, alone.markers)
	assert.Equal(t, []string{"fwd", "fwd"}, alone.labels)

	first := &markerLog{gatedLog: gatedLog{dueAfter: never}}
	second := &stepLog{}
	run(replay.Recorders(first, second), events)
	assert.Equal(t, []int64{0, 4}, first.markers)

	without := run(nil, events[1:4])
	assert.Equal(t, without.Devices[0].Stats, withMarkers.Devices[0].Stats)
}

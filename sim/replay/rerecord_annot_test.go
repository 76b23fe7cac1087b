package replay_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// A recording of a replay carries the input's annotations (beside its
// events), each before the recording's events for the input event it came
// before: the recorded segment_alloc precedes its alloc, so the
// annotations after the first alloc move by one, and the replaying
// allocator completes the free (no stream to wait for) at its
// free_requested, both stamped with that input's time, so the END that
// came before the input's free_completed comes after the recording's. In
// memory, to the native format (read back) and to a pickle
// (external_annotations, placed again by their times: the same places).
func TestReplayRecorderAnnotations(t *testing.T) {
	const a = 0x7f0000000000
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: trace.NewStacks(), Events: []trace.Event{
		{Action: trace.ActionAlloc, Addr: a, Size: 1 << 20, TimeUS: 10},
		{Action: trace.ActionFreeRequested, Addr: a, Size: 1 << 20, TimeUS: 20},
		{Action: trace.ActionFreeCompleted, Addr: a, Size: 1 << 20, TimeUS: 30},
		{Action: trace.ActionAlloc, Addr: a, Size: 1 << 20, TimeUS: 40},
	}, Annotations: []trace.Annotation{
		{Device: 0, TimeUS: 5, Name: "fwd", Stage: "START", Event: 0},
		{Device: 0, TimeUS: 25, Name: "fwd", Stage: "END", Event: 2},
		{Device: 0, TimeUS: 50, Name: "opt", Stage: "END", Event: 4},
	}}
	rec, _ := recordReplay(t, tr, replay.Options{})
	var actions []trace.Action
	for _, e := range rec.Events {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []trace.Action{trace.ActionSegmentAlloc, trace.ActionAlloc, trace.ActionFreeRequested,
		trace.ActionFreeCompleted, trace.ActionAlloc}, actions)
	want := []trace.Annotation{
		{Device: 0, TimeUS: 5, Name: "fwd", Stage: "START", Event: 0},
		{Device: 0, TimeUS: 25, Name: "fwd", Stage: "END", Event: 4},
		{Device: 0, TimeUS: 50, Name: "opt", Stage: "END", Event: 5},
	}
	assert.Equal(t, want, rec.Annotations)

	// Streamed to the native format.
	var buf bytes.Buffer
	r := tr.NewReader()
	rr := replay.NewReplayRecorderTo(&buf, r, replay.ReplayRecordOptions{Name: "test"})
	_, err := replay.Run(r, replay.Options{Recorder: rr})
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	native := bytes.Clone(buf.Bytes())
	nr, err := trace.NewNativeReader(&buf, "rec.mrt")
	require.NoError(t, err)
	back, err := trace.ReadAll(nr)
	require.NoError(t, err)
	assert.Equal(t, want, back.Annotations)

	// Recorded again from that native file, streamed (its annotations
	// come after its events, known only at its end): placed as from the
	// same trace in memory.
	again, _ := recordReplay(t, back, replay.Options{})
	nr, err = trace.NewNativeReader(bytes.NewReader(native), "rec.mrt")
	require.NoError(t, err)
	rr = replay.NewReplayRecorder(nr, replay.ReplayRecordOptions{Name: "test"})
	_, err = replay.Run(nr, replay.Options{Recorder: rr})
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	require.Len(t, again.Annotations, 3)
	assert.Equal(t, again.Annotations, rr.Trace().Annotations)

	// As a pickle: external_annotations, placed again by their times.
	buf.Reset()
	r = tr.NewReader()
	rr, err = replay.NewReplayRecorderPyTorch(&buf, t.TempDir(), r, replay.ReplayRecordOptions{Name: "test"})
	require.NoError(t, err)
	_, err = replay.Run(r, replay.Options{Recorder: rr})
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	pk, err := trace.ReadPyTorch(&buf, "rec.pickle")
	require.NoError(t, err)
	assert.Equal(t, want, pk.Annotations)
}

// An input event the replay skips without stepping (a lenient replay's
// event of an out-of-range device) does not move the annotation before it
// into the recording's events of the input before: that input's segment
// allocation and allocation are two events, so the annotation before the
// skipped event comes after both, as does the one before the next.
func TestReplayRecorderAnnotationsSkippedInput(t *testing.T) {
	const a = 0x7f0000000000
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: trace.NewStacks(), Events: []trace.Event{
		{Action: trace.ActionAlloc, Addr: a, Size: 1 << 20, TimeUS: 10},
		{Action: trace.ActionAlloc, Device: replay.MaxDevice + 1, Addr: a, Size: 1 << 20, TimeUS: 20},
		{Action: trace.ActionAlloc, Device: replay.MaxDevice + 1, Addr: a, Size: 1 << 20, TimeUS: 25},
		{Action: trace.ActionFreeRequested, Addr: a, Size: 1 << 20, TimeUS: 30},
	}, Annotations: []trace.Annotation{
		{Device: 0, TimeUS: 15, Name: "skip", Stage: "START", Event: 1},
		{Device: 0, TimeUS: 22, Name: "skip", Stage: "END", Event: 2},
		{Device: 0, TimeUS: 28, Name: "free", Stage: "START", Event: 3},
	}}
	rec, res := recordReplay(t, tr, replay.Options{Lenient: true})
	require.EqualValues(t, 2, res.Skipped)
	var actions []trace.Action
	for _, e := range rec.Events {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []trace.Action{trace.ActionSegmentAlloc, trace.ActionAlloc}, actions[:2])
	var at []int64
	for _, an := range rec.Annotations {
		at = append(at, an.Event)
	}
	assert.Equal(t, []int64{2, 2, 2}, at)
}

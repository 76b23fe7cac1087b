package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// stepLog records the Steps a replay calls, with the position the replay
// kept at each (under a gate).
type stepLog struct {
	steps []stepAt
	pos   *replay.Position
}

type stepAt struct {
	index, next, time int64
}

func (l *stepLog) Attach(int32, *allocator.Allocator, replay.Process)  {}
func (l *stepLog) Restored(int32)                                      {}
func (l *stepLog) Alloc(int32, int64, *allocator.Block, trace.StackID) {}
func (l *stepLog) Free(int32, int64, *allocator.Block, trace.StackID)  {}
func (l *stepLog) OOM(int32, int64, *allocator.OutOfMemoryError)       {}
func (l *stepLog) Step(index int64, e *trace.Event) {
	s := stepAt{index: index, next: -1, time: -1}
	if l.pos != nil {
		s.next, s.time = l.pos.Next, l.pos.TimeUS
	}
	l.steps = append(l.steps, s)
}

// gatedLog is a stepLog behind a step gate whose due index is set by dueAfter
// after each Step (-1: every event).
type gatedLog struct {
	stepLog
	due      int64
	dueAfter func(index int64) int64
}

func (g *gatedLog) GateSteps(pos *replay.Position) *int64 {
	g.pos, g.due = pos, -1
	return &g.due
}

func (g *gatedLog) Step(index int64, e *trace.Event) {
	g.stepLog.Step(index, e)
	g.due = g.dueAfter(index)
}

// TestStepGate: a recorder with a step gate is stepped exactly at the
// events from its due index on (re-read after each Step, the consumed
// free_completed of a pair included), never at an out-of-range device's
// skipped event, and the position it reads holds one past the event
// stepped and the latest non-zero time, as the ungated Steps saw them.
func TestStepGate(t *testing.T) {
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", Devices: []trace.Device{{Index: 0, Capacity: 1 << 30}}}, Stacks: trace.NewStacks()}
	add := func(e trace.Event) { tr.Events = append(tr.Events, e) }
	tm := int64(100)
	for i := range 60 {
		a := uint64(0x1000000 + i*0x100000)
		tm += 10
		add(trace.Event{Action: trace.ActionAlloc, Addr: a, Size: 4096, TimeUS: tm})
		if i%7 == 3 {
			add(trace.Event{Action: trace.ActionAlloc, Device: -1, Addr: 1, Size: 512, TimeUS: tm + 5}) // skipped
		}
		tm += 10
		if i%5 == 0 {
			tm = 0 // no recorded time: the latest earlier one stands
		}
		add(trace.Event{Action: trace.ActionFreeRequested, Addr: a, Size: 4096, TimeUS: tm})
		if tm == 0 {
			tm = 1000 * int64(i+1)
		}
		if i%3 != 0 {
			tm += 10
			add(trace.Event{Action: trace.ActionFreeCompleted, Addr: a, Size: 4096, TimeUS: tm}) // consumed with its request
		}
	}
	// What every Step saw without the gate: index and time.
	var want []stepAt
	last := int64(0)
	for i, e := range tr.Events {
		if e.Device < 0 {
			continue
		}
		if e.TimeUS != 0 {
			last = e.TimeUS
		}
		want = append(want, stepAt{index: int64(i), next: int64(i) + 1, time: last})
	}

	plain := &stepLog{}
	_, err := replay.Run(tr.NewReader(), replay.Options{Recorder: plain, Lenient: true})
	require.NoError(t, err)
	require.Len(t, plain.steps, len(want))
	for k := range want {
		require.Equal(t, want[k].index, plain.steps[k].index)
	}

	every := &gatedLog{dueAfter: func(int64) int64 { return -1 }}
	_, err = replay.Run(tr.NewReader(), replay.Options{Recorder: every, Lenient: true})
	require.NoError(t, err)
	require.Equal(t, want, every.steps)

	// Due every fifth index (and at once after an odd one): only those.
	sparse := &gatedLog{dueAfter: func(i int64) int64 {
		if i%2 == 1 {
			return i + 1
		}
		return (i/5 + 1) * 5
	}}
	_, err = replay.Run(tr.NewReader(), replay.Options{Recorder: sparse, Lenient: true})
	require.NoError(t, err)
	var wantSparse []stepAt
	due := int64(-1)
	for _, s := range want {
		if s.index >= due {
			wantSparse = append(wantSparse, s)
			due = sparse.dueAfter(s.index)
		}
	}
	require.Less(t, len(wantSparse), len(want)/2)
	require.Equal(t, wantSparse, sparse.steps)
}

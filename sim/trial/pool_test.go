package trial

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// run is a trial as a consumer sees it: its events and each event's frames.
type run struct {
	events []trace.Event
	frames [][]trace.Frame
	stacks int
}

// readAll reads r to the end. eager asks for the stack table before the
// first event (as `memreplay synth` does), otherwise after the last.
func readAll(t *testing.T, r trace.Reader, eager bool) run {
	t.Helper()
	var st *trace.Stacks
	if eager {
		st = r.Stacks()
	}
	var out run
	for {
		var e trace.Event
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		out.events = append(out.events, e)
	}
	if !eager {
		st = r.Stacks()
	}
	for _, e := range out.events {
		out.frames = append(out.frames, st.Frames(e.Stack))
	}
	out.stacks = st.NumStacks()
	return out
}

// fresh is a reader that owes nothing to the free list.
func fresh(s Spec) *reader {
	r := &reader{}
	r.start(s)
	return r
}

// TestReleasedReaderMakesTheSameTrial runs every switch's trial on readers
// released by other trials (other models, switches, lengths) and compares
// it with the trial on a fresh reader: a field the reset forgot would carry
// the last trial into the next.
func TestReleasedReaderMakesTheSameTrial(t *testing.T) {
	ss := append(specs(t),
		Spec{Model: tiny, Batch: 2, SeqLen: 16, Steps: 40, EvalEvery: 7, EvalBatches: 2, Precision: FP16, DynamicPadding: true, Seed: 3},
		Spec{Model: tiny, Batch: 3, SeqLen: 24, Steps: 1})
	want := make([]run, len(ss))
	for i, s := range ss {
		want[i] = readAll(t, fresh(s), true)
	}
	var order []int
	for i := range ss {
		order = append(order, i)
	}
	for i := len(ss) - 1; i >= 0; i -= 2 {
		order = append(order, i)
	}
	var last *reader
	for _, i := range order {
		tr, err := ss[i].Reader()
		require.NoError(t, err)
		r := tr.(*reader)
		if last != nil {
			assert.Same(t, last, r, "the released reader is reused")
		}
		got := readAll(t, r, false)
		require.Equal(t, len(want[i].events), len(got.events), "%s", ss[i])
		assert.Equal(t, want[i].events, got.events, "%s: events", ss[i])
		assert.Equal(t, want[i].frames, got.frames, "%s: frames", ss[i])
		assert.Equal(t, want[i].stacks, got.stacks, "%s: stack table", ss[i])
		r.Release()
		r.Release() // a second Release must not put it on the list twice
		last = r
	}
	a, err := ss[0].Reader()
	require.NoError(t, err)
	b, err := ss[0].Reader()
	require.NoError(t, err)
	assert.NotSame(t, a, b, "one reader handed out twice")
}

// TestStacksAskedMidTrial asks a released reader for its stack table in the
// middle of a trial: the table must hold what a table made from the start
// holds at that point, and grow with the trial from then on.
func TestStacksAskedMidTrial(t *testing.T) {
	s := Spec{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 2, Precision: BF16, GradientCheckpointing: true}
	other, err := Spec{Model: tiny, Batch: 2, SeqLen: 16, Steps: 2}.Reader()
	require.NoError(t, err)
	readAll(t, other, false)
	other.(*reader).Release()

	eager := fresh(s)
	est := eager.Stacks()
	lazy, err := s.Reader()
	require.NoError(t, err)
	var e, f trace.Event
	for i := 0; i < 500; i++ {
		require.NoError(t, eager.Next(&e))
		require.NoError(t, lazy.Next(&f))
	}
	lst := lazy.Stacks()
	check := func() {
		require.Equal(t, est.NumStacks(), lst.NumStacks())
		for id := 0; id < est.NumStacks(); id++ {
			assert.Equal(t, est.Frames(trace.StackID(id)), lst.Frames(trace.StackID(id)))
		}
	}
	check()
	for {
		err := eager.Next(&e)
		require.Equal(t, err, lazy.Next(&f))
		if err == io.EOF {
			break
		}
		require.Equal(t, e, f)
	}
	check()
}

// TestReleasedReaderAllocations reads trials on a released reader: the
// generator's tables, buffers and chunks are the last trial's, so a trial
// makes no heap object, however long.
func TestReleasedReaderAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	short := Spec{Model: tiny, Batch: 2, SeqLen: 16, Steps: 2, Precision: FP16}
	long := short
	long.Steps = 30
	events := map[int]int{}
	var e trace.Event // one for every trial: Next's argument escapes
	trial := func(s Spec) {
		r, err := s.Reader()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next(&e) == nil {
			n++
		}
		events[s.Steps] = n
		r.(*reader).Release()
	}
	trial(long)
	trial(short)
	a := testing.AllocsPerRun(10, func() { trial(short) })
	b := testing.AllocsPerRun(10, func() { trial(long) })
	t.Logf("%v allocations in a trial of %d events, %v in one of %d", a, events[short.Steps], b, events[long.Steps])
	assert.Zero(t, a)
	assert.Zero(t, b)
}

// A released reader keeps no event's label (the trial's and its markers'
// strings): Release drops the labels mark wrote, not the whole buffer,
// and the buffer must hold none after, whether the phases that wrote them
// were overwritten since or not, nor after a second trial on the same
// reader, nor after the buffer grew.
func TestReleasedReaderKeepsNoLabels(t *testing.T) {
	small := Spec{Model: tiny, Batch: 2, SeqLen: 16, Steps: 3, Precision: FP16}
	big := small
	big.Batch, big.Steps = 8, 12
	r0, err := small.Reader()
	require.NoError(t, err)
	r := r0.(*reader)
	labels := 0
	for _, s := range []Spec{small, big, small} {
		r.start(s)
		var e trace.Event
		for r.Next(&e) == nil {
			if e.Label != "" {
				labels++
			}
		}
		r.Release()
		for i, ev := range r.g.buf[:cap(r.g.buf)] {
			require.Empty(t, ev.Label, "event %d of the released buffer", i)
		}
		require.Same(t, r, readers.get(), "the released reader is the pool's")
	}
	require.Greater(t, labels, 6)
}

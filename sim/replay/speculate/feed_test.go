package speculate

import (
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// The feed hands the speculative replay every event in order: packed
// while the reader has not started, as batches
// once it reads, the end state after the last; an import that starts
// over aborts the reader.
func TestSpecFeedOrder(t *testing.T) {
	const before, after = 3*specSegment + 5, 5*specBatch + 7
	ev := func(i int) trace.Event {
		return trace.Event{Action: trace.ActionAlloc, Addr: uint64(i) * 512, Size: uint64(i%7 + 1), TimeUS: int64(i)}
	}
	f := newSpecFeed(1 << 30)
	for i := range before {
		e := ev(i)
		f.Event(int64(i), &e)
	}
	r := &specReader{feed: f}
	got := make([]trace.Event, 0, before+after)
	var e trace.Event
	require.NoError(t, r.Next(&e)) // the reader starts: batches from now on
	got = append(got, e)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := before; i < before+after; i++ {
			e := ev(i)
			f.Event(int64(i), &e)
		}
		f.finish(&trace.Opened{Packed: &trace.Packed{Events: &trace.EventLog{}, Final: []trace.Segment{{Address: 1}}, HasFinal: true}}, nil)
	}()
	_, ok := r.Final()
	require.False(t, ok, "no end state before the last event")
	buf := make([]trace.Event, 100)
	for k := 0; ; k++ {
		if k%3 == 0 {
			if err := r.Next(&e); err == io.EOF {
				break
			}
			got = append(got, e)
			continue
		}
		n, err := r.NextBatch(buf)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, buf[:n]...)
	}
	<-done
	require.Len(t, got, before+after)
	for i := range got {
		require.Equal(t, ev(i), got[i], "event %d", i)
	}
	final, ok := r.Final()
	require.True(t, ok)
	require.Len(t, final, 1)
	require.False(t, f.wasAborted())

	g := newSpecFeed(1 << 30)
	e = ev(1)
	g.Event(0, &e)
	g.Restart()
	rr := &specReader{feed: g}
	require.ErrorIs(t, rr.Next(&e), errSpecAborted)
	require.True(t, g.wasAborted())
}

// The feed gives the guess up as soon as the reconstruction's walk finds
// what the trace did not start from (a free of a block it never
// allocated); its bounds narrow no more.
func TestSpecFeedGivesUpEarly(t *testing.T) {
	f := newSpecFeed(1 << 30)
	alloc := trace.Event{Action: trace.ActionAlloc, Addr: 1 << 20, Size: 512}
	f.walk.Event(0, &alloc)
	f.Event(0, &alloc)
	require.False(t, f.wasAborted())
	free := trace.Event{Action: trace.ActionFreeRequested, Addr: 4 << 20, Size: 512}
	f.walk.Event(1, &free)
	f.Event(1, &free)
	require.True(t, f.wasAborted())
	f.Progress(1<<20, 1<<24)
	lo, hi := f.bounds.Bounds()
	require.Equal(t, int64(0), lo)
	require.Equal(t, int64(math.MaxInt64), hi)
}

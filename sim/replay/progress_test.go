package replay_test

import (
	"reflect"
	"testing"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// TestProgressAndStopAfter pins when Options.Progress is called and where
// StopAfter ends a replay, which the loop looks at only from a precomputed
// event count on: Progress gets, for each multiple of ProgressEvery, the
// first count of an event of the loop's own at or past it (a count it
// passes as the free_completed a free_requested takes with it is not
// skipped: Progress once fired only on exact multiples, and never on a
// trace of paired frees whose multiples all fell on such counts);
// StopAfter stops at exactly its count. The expected calls are worked out
// from the trace itself.
func TestProgressAndStopAfter(t *testing.T) {
	// Alloc, free_requested, free_completed, over and over: the loop
	// replays the first two itself, so of the counts only those not a
	// multiple of three are its own (65536 and 131072 are, 196608 is
	// not, 262144 is).
	tr := &trace.Trace{Header: trace.Header{Devices: []trace.Device{{Index: 0, Capacity: 80 << 30}}}, Stacks: trace.NewStacks()}
	for i := 0; len(tr.Events) < 300_000; i++ {
		a := uint64(0x7f00_0000_0000) + uint64(i%64)<<20
		tr.Events = append(tr.Events,
			trace.Event{Action: trace.ActionAlloc, Addr: a, Size: 4096},
			trace.Event{Action: trace.ActionFreeRequested, Addr: a, Size: 4096},
			trace.Event{Action: trace.ActionFreeCompleted, Addr: a, Size: 4096})
	}
	for _, stop := range []int64{0, 131_071, 131_072, 196_609, 262_144, 262_145} {
		var want []int64
		next := int64(replay.ProgressEvery)
		for n := int64(1); n <= int64(len(tr.Events)) && (stop == 0 || n <= stop); n++ {
			if n >= next && n%3 != 0 {
				want = append(want, n)
				next = (n/replay.ProgressEvery + 1) * replay.ProgressEvery
			}
		}
		if pe := int64(replay.ProgressEvery); stop == 0 && !reflect.DeepEqual(want, []int64{pe, 2 * pe, 3*pe + 1, 4 * pe}) {
			t.Fatalf("expected calls %v: 196608 is a free_completed's count, so 196609 stands for it", want)
		}
		var got []int64
		res, err := replay.Run(tr.NewReader(), replay.Options{StopAfter: stop, Progress: func(n int64) { got = append(got, n) }})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("StopAfter %d: Progress called with %v, want %v", stop, got, want)
		}
		// The loop looks at StopAfter before each event it replays
		// itself: a stop inside a pair ends after the pair.
		wantEvents := stop
		if stop%3 == 2 {
			wantEvents++
		}
		if stop > 0 && res.Events != wantEvents {
			t.Errorf("StopAfter %d: stopped after %d events, want %d", stop, res.Events, wantEvents)
		}
		if stop == 0 && res.Events != int64(len(tr.Events)) {
			t.Errorf("replayed %d events of %d", res.Events, len(tr.Events))
		}
	}
}

package trace

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// drainNext reads every event with Next and the error that ended it.
func drainNext(t *testing.T, data []byte) ([]Event, error) {
	t.Helper()
	r, err := NewNativeReader(bytes.NewReader(data), "x.mrt")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []Event
	for {
		var e Event
		if err := r.Next(&e); err != nil {
			return out, err
		}
		out = append(out, e)
	}
}

// drainBatch reads every event with NextBatch, k at a time, and checks the
// contract: a full or partial batch with a nil error, then 0 and the error.
func drainBatch(t *testing.T, data []byte, k int) ([]Event, error) {
	t.Helper()
	r, err := NewNativeReader(bytes.NewReader(data), "x.mrt")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	br := r.(BatchReader)
	evs := make([]Event, k)
	var out []Event
	for {
		n, err := br.NextBatch(evs)
		if err != nil {
			if n != 0 {
				t.Fatalf("NextBatch returned %d events with error %v", n, err)
			}
			return out, err
		}
		if n <= 0 || n > k {
			t.Fatalf("NextBatch returned %d events and no error (batch of %d)", n, k)
		}
		out = append(out, evs[:n]...)
	}
}

// TestNextBatchMatchesNext reads the same files, whole, truncated and
// corrupted, with Next and with NextBatch in batches of several sizes:
// the events and the error that ends them (io.EOF or the same
// *FormatError, at the same event) must be the same.
func TestNextBatchMatchesNext(t *testing.T) {
	for _, v := range nativeVersions {
		t.Run("v"+strconv.Itoa(v), func(t *testing.T) { testNextBatchMatchesNext(t, v) })
	}
}

func testNextBatchMatchesNext(t *testing.T, v int) {
	tr := genTrainingTrace(20_000, 3)
	tr.Events[100].Label = "a label on an alloc goes in an extras record"
	tr.Events = append(tr.Events, Event{Action: ActionMarker, Label: "end"})
	good := writeNativeV(t, tr, v)
	cases := map[string][]byte{"whole": good}
	for _, cut := range []int{len(good) / 3, len(good) - 5} {
		cases["truncated"+string(rune('a'+len(cases)))] = good[:cut]
	}
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x40
	cases["corrupt"] = bad
	for name, data := range cases {
		want, wantErr := drainNext(t, data)
		if name == "whole" && (wantErr != io.EOF || len(want) != len(tr.Events)) {
			t.Fatalf("whole file: Next read %d events of %d, ended with %v", len(want), len(tr.Events), wantErr)
		}
		if name != "whole" && wantErr == io.EOF {
			t.Fatalf("%s: Next read it without an error", name)
		}
		for _, k := range []int{1, 7, 128, 4096} {
			got, gotErr := drainBatch(t, data, k)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, batches of %d: %d events, Next read %d (or they differ)", name, k, len(got), len(want))
			}
			var fe, wfe *FormatError
			if errors.As(wantErr, &wfe) {
				if !errors.As(gotErr, &fe) || fe.Error() != wfe.Error() {
					t.Fatalf("%s, batches of %d: error %v, Next's %v", name, k, gotErr, wantErr)
				}
			} else if gotErr != wantErr {
				t.Fatalf("%s, batches of %d: error %v, Next's %v", name, k, gotErr, wantErr)
			}
		}
	}
}

// FuzzNextBatch reads arbitrary bytes (as a body and as a file) with Next
// and with NextBatch: the same events, then the same error.
func FuzzNextBatch(f *testing.F) {
	nativeFuzzSeeds(f)
	nativeDecoderConcurrency = 1 // thousands of tiny files: start fast
	f.Cleanup(func() { nativeDecoderConcurrency = 0 })
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, nativeFileOf(1, data), nativeFileOf(2, data)} {
			want, wantErr := drainNext(t, in)
			for _, k := range []int{1, 5} {
				got, gotErr := drainBatch(t, in, k)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("batches of %d: %d events, Next read %d (or they differ)", k, len(got), len(want))
				}
				if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
					t.Fatalf("batches of %d: error %v, Next's %v", k, gotErr, wantErr)
				}
			}
		}
	})
}

// randomVarintTrace builds n events whose fields take every varint length
// from one byte to ten (addresses jump forwards and backwards by deltas of
// every magnitude, sizes and times likewise), on mostly one device and
// stream, with now and then what the fast path leaves to the general
// decoder: another device or stream, an oom, a labelled marker, an
// extras record (a label on an alloc), a stack-less or stacked event.
func randomVarintTrace(n int, seed uint64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 7))
	st := NewStacks()
	var stacks []StackID
	for k := 0; k < 300; k++ { // past 127: two-byte stack references too
		stacks = append(stacks, st.Intern([]Frame{{Filename: "f.py", Line: int64(k), Name: "g"}}))
	}
	mag := func() uint64 { // a value of 0 to 64 bits, every length equally likely
		bitsN := rng.IntN(65)
		if bitsN == 0 {
			return 0
		}
		return rng.Uint64() >> (64 - bitsN)
	}
	tr := &Trace{Stacks: st}
	addr := uint64(0x7f00_0000_0000)
	now := int64(1_700_000_000_000_000)
	for i := 0; i < n; i++ {
		e := Event{Action: Action(1 + rng.IntN(int(numActions)-1)), Size: mag()}
		if rng.IntN(4) != 0 { // mostly the plain actions
			e.Action = []Action{ActionAlloc, ActionFreeRequested, ActionFreeCompleted}[rng.IntN(3)]
		}
		if rng.IntN(2) == 0 {
			addr += mag()
		} else {
			addr -= mag()
		}
		e.Addr = addr
		if !hasAddrDelta(e.Action) && rng.IntN(2) == 0 {
			e.Addr = 0
		}
		if rng.IntN(2) == 0 {
			now += int64(mag())
		} else {
			now -= int64(mag() >> 1)
		}
		e.TimeUS = now
		if rng.IntN(3) == 0 {
			e.Stack = stacks[rng.IntN(len(stacks))]
		}
		switch rng.IntN(50) {
		case 0:
			e.Device = int32(rng.IntN(3))
		case 1:
			e.Stream = uint64(rng.IntN(4)) << 40
		case 2:
			e.Label = "extras"
		}
		if e.Action == ActionOOM {
			e.DeviceFree = mag()
		}
		if hasLabelSlot(e.Action) {
			e.Label = "label"
		}
		tr.Events = append(tr.Events, e)
	}
	return tr
}

// TestPlainEventsMatchEvent reads traces (in both format versions, two
// seeds each) whose fields take every varint
// length with Next (the general decoder alone) and with NextBatch (its
// fast path, plainEvents, for most events): any field the fast path
// decodes differently, or a state it leaves behind wrongly for the
// general decoder's next event, makes the two lists differ. It also
// checks that the fast path did decode most events.
func TestPlainEventsMatchEvent(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		tr := randomVarintTrace(30_000, seed)
		v := nativeVersions[seed%uint64(len(nativeVersions))]
		data := writeNativeV(t, tr, v)
		want, err := drainNext(t, data)
		if err != io.EOF || len(want) != len(tr.Events) {
			t.Fatalf("Next read %d events of %d, ended with %v", len(want), len(tr.Events), err)
		}
		for i, e := range want { // the file numbers stacks in its own order
			w := tr.Events[i]
			if (e.Stack == 0) != (w.Stack == 0) {
				t.Fatalf("seed %d: event %d: stack %d read back as %d", seed, i, w.Stack, e.Stack)
			}
			e.Stack, w.Stack = 0, 0
			if e != w {
				t.Fatalf("seed %d: event %d: %+v read back as %+v", seed, i, w, e)
			}
		}
		for _, k := range []int{3, 128} {
			got, err := drainBatch(t, data, k)
			if err != io.EOF {
				t.Fatalf("seed %d, batches of %d: ended with %v", seed, k, err)
			}
			if len(got) != len(want) {
				t.Fatalf("seed %d, batches of %d: %d events, Next read %d", seed, k, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("seed %d, batches of %d: event %d is %+v, Next read %+v", seed, k, i, got[i], want[i])
				}
			}
		}
		r, err := NewNativeReader(bytes.NewReader(data), "x.mrt")
		if err != nil {
			t.Fatal(err)
		}
		evs := make([]Event, 128)
		for {
			if _, err := r.(BatchReader).NextBatch(evs); err != nil {
				break
			}
		}
		if nr := r.(*nativeReader); nr.plain < int64(len(want))/3 {
			t.Errorf("seed %d: the fast path decoded %d events of %d", seed, nr.plain, len(want))
		}
		r.Close()
	}
}

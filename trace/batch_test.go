package trace

import (
	"bytes"
	"errors"
	"io"
	"reflect"
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
	tr := genTrainingTrace(20_000, 3)
	tr.Events[100].Label = "a label on an alloc goes in an extras record"
	tr.Events = append(tr.Events, Event{Action: ActionMarker, Label: "end"})
	good := writeNative(t, tr)
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
	small := nativeSampleTrace()
	small.Events[17].Label = "short"
	file := writeNative(f, small)
	f.Add(file)
	f.Add(nativeBody(f, file))
	f.Add(nativeBody(f, writeNative(f, genTrainingTrace(300, 5))))
	nativeDecoderConcurrency = 1 // thousands of tiny files: start fast
	f.Cleanup(func() { nativeDecoderConcurrency = 0 })
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, nativeFileOf(1, data)} {
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

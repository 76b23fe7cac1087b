package trace

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genTrainingTrace builds a synthetic trace shaped like a PyTorch training
// loop recorded with _record_memory_history: per iteration a marker, a
// forward pass that allocates each layer's activations (plus short-lived
// temporaries), a backward pass that frees them in reverse and allocates
// gradients, and an optimizer step that frees the gradients. As under the
// caching allocator, the same addresses recur from one iteration to the
// next; allocations carry stacks from a few hundred distinct call sites,
// frees carry none (context="alloc"); a side stream carries 5% of events.
func genTrainingTrace(n int, seed uint64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	st := NewStacks()
	const layers = 48
	files := []string{"train.py", "model.py", "torch/nn/modules/module.py",
		"torch/nn/modules/linear.py", "torch/nn/functional.py", "torch/_tensor.py",
		"torch/autograd/__init__.py", "torch/optim/adamw.py"}
	common := []Frame{
		{Filename: "train.py", Line: 212, Name: "main"},
		{Filename: "train.py", Line: 148, Name: "train_epoch"},
		{Filename: "torch/nn/modules/module.py", Line: 1736, Name: "_call_impl"},
	}
	stackFor := func(layer, kind int) StackID {
		fr := append([]Frame(nil), common...)
		depth := 4 + (layer*7+kind)%9
		for d := 0; d < depth; d++ {
			f := files[(layer+d*3+kind)%len(files)]
			fr = append(fr, Frame{Filename: f, Line: int64(100 + (layer*31+d*17+kind*5)%900), Name: fmt.Sprintf("fn_%d_%d", (layer+d)%20, kind)})
		}
		return st.Intern(fr)
	}
	type site struct {
		stack StackID
		size  uint64
		addr  uint64
	}
	fwd := make([]site, layers)
	tmp := make([]site, layers)
	grad := make([]site, layers)
	const base = 0x7f2a_0000_0000
	off := uint64(0)
	place := func(size uint64) uint64 {
		a := base + off
		off += (size + 511) &^ 511
		return a
	}
	for l := 0; l < layers; l++ {
		fwd[l] = site{stackFor(l, 0), uint64(8*1024*(32+l%5*16)) + uint64(l%3), 0}
		tmp[l] = site{stackFor(l, 1), uint64(2*1024*(8+l%7*4)) + 17, 0}
		grad[l] = site{stackFor(l, 2), uint64(4*1024*(64+l%4*32)) + 4, 0}
		fwd[l].addr = place(fwd[l].size)
		tmp[l].addr = place(tmp[l].size)
		grad[l].addr = place(grad[l].size)
	}
	t := &Trace{
		Header: Header{Version: FormatVersion, Source: "memreplay-synthetic",
			Devices: []Device{{Index: 0, Name: "synthetic", Capacity: 24 << 30}}},
		Stacks: st,
		Events: make([]Event, 0, n),
	}
	now := int64(1_732_000_000_000_000)
	side := uint64(0x5613_ab00_0460)
	add := func(e Event) {
		now += 1 + rng.Int64N(20)
		e.TimeUS = now
		if rng.IntN(20) == 0 {
			e.Stream = side
		}
		t.Events = append(t.Events, e)
	}
	addr := func(s site) uint64 {
		if rng.IntN(10) == 0 { // the allocator picked another block
			return s.addr + uint64(rng.IntN(64))*512 + 1<<30
		}
		return s.addr
	}
	free := func(a, size uint64) {
		add(Event{Action: ActionFreeRequested, Addr: a, Size: size})
		add(Event{Action: ActionFreeCompleted, Addr: a, Size: size})
	}
	for seg := uint64(0); seg < off; seg += 20 << 20 {
		add(Event{Action: ActionSegmentAlloc, Addr: base + seg, Size: 20 << 20})
	}
	live := make([]uint64, layers)
	for it := 0; len(t.Events) < n; it++ {
		now += 1000
		add(Event{Action: ActionMarker, Label: fmt.Sprintf("iteration %d", it)})
		for l := 0; l < layers; l++ {
			live[l] = addr(fwd[l])
			add(Event{Action: ActionAlloc, Addr: live[l], Size: fwd[l].size, Stack: fwd[l].stack})
			ta := addr(tmp[l])
			add(Event{Action: ActionAlloc, Addr: ta, Size: tmp[l].size, Stack: tmp[l].stack})
			free(ta, tmp[l].size)
		}
		for l := layers - 1; l >= 0; l-- {
			add(Event{Action: ActionAlloc, Addr: grad[l].addr, Size: grad[l].size, Stack: grad[l].stack})
			free(live[l], fwd[l].size)
		}
		for l := 0; l < layers; l++ {
			free(grad[l].addr, grad[l].size)
		}
	}
	t.Events = t.Events[:n]
	return t
}

func writeNative(tb testing.TB, t *Trace) []byte {
	tb.Helper()
	return writeNativeV(tb, t, FormatVersion)
}

// writeNativeV writes t in the given format version.
func writeNativeV(tb testing.TB, t *Trace, version int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := writeTrace(&buf, t, version); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// nativeVersions are the format versions the reader reads, each tested.
var nativeVersions = []int{1, 2}

func BenchmarkNativeWrite(b *testing.B) {
	const n = 1_000_000
	t := genTrainingTrace(n, 1)
	size := len(writeNative(b, t))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := WriteTrace(io.Discard, t); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(size)/n, "bytes/event")
}

func BenchmarkNativeRead(b *testing.B) {
	const n = 1_000_000
	data := writeNative(b, genTrainingTrace(n, 1))
	body := len(nativeBody(b, data))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewNativeReader(bytes.NewReader(data), "bench")
		if err != nil {
			b.Fatal(err)
		}
		var e Event
		k := 0
		for {
			err := r.Next(&e)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			k++
		}
		r.Close()
		if k != n {
			b.Fatalf("read %d events, want %d", k, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(len(data))/n, "bytes/event")
	b.ReportMetric(float64(body)/n, "body-bytes/event") // before zstd
}

// BenchmarkNativeReadBatch is BenchmarkNativeRead through NextBatch, as
// the replay reads: 128 events a call into one reused slice.
func BenchmarkNativeReadBatch(b *testing.B) {
	const n = 1_000_000
	data := writeNative(b, genTrainingTrace(n, 1))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	evs := make([]Event, 128)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewNativeReader(bytes.NewReader(data), "bench")
		if err != nil {
			b.Fatal(err)
		}
		br := r.(BatchReader)
		k := 0
		for {
			m, err := br.NextBatch(evs)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			k += m
		}
		r.Close()
		if k != n {
			b.Fatalf("read %d events, want %d", k, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkNativeVsPickle converts the PyTorch snapshots the project keeps
// in ../shared/traces/pytorch (when that directory is there) and reports,
// per file, the native size against the pickle's, bytes per event and the
// native decode rate (open included: these traces are small).
func BenchmarkNativeVsPickle(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "shared", "traces", "pytorch", "*.pickle"))
	if len(files) == 0 {
		b.Skip("no ../shared/traces/pytorch/*.pickle")
	}
	for _, path := range files {
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		o, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		t := o.Trace
		o.Close()
		data := writeNative(b, t)
		name := strings.TrimSuffix(filepath.Base(path), ".pickle")
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r, err := NewNativeReader(bytes.NewReader(data), path)
				if err != nil {
					b.Fatal(err)
				}
				var e Event
				for {
					if err := r.Next(&e); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
				r.Close()
			}
			n := len(t.Events)
			b.ReportMetric(float64(st.Size())/float64(len(data)), "x-smaller")
			b.ReportMetric(float64(n), "events")
			if n > 0 {
				b.ReportMetric(float64(len(data))/float64(n), "bytes/event")
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			}
		})
	}
}

package profiler_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// BenchmarkProfilerAllocFree measures the recorder alone: one Alloc, one
// Free, the free_requested and free_completed entries its observer gets
// from the allocator, and two Steps per iteration, over 4096 real blocks of
// mixed sizes (live all the time in the allocator; the profiler sees them
// come and go) and 512 sites.
func BenchmarkProfilerAllocFree(b *testing.B) {
	proc, a := newAllocator(b, 64<<30, "", 0)
	const n = 4096
	blocks := make([]*allocator.Block, n)
	for i := range blocks {
		size := uint64(512 << (i % 12)) // 512 B .. 1 MiB
		if i%7 == 0 {
			size = uint64(2+i%5) << 20
		}
		blk, err := a.Malloc(size, 0)
		if err != nil {
			b.Fatal(err)
		}
		blocks[i] = blk
	}
	p := profiler.New(nil, profiler.Options{})
	p.Attach(0, a, proc)
	e := trace.Event{Action: trace.ActionAlloc}
	var idx int64
	// Warm up: every block once, so that peaks, site slices and the
	// address table have reached their steady state.
	for i, blk := range blocks {
		p.Alloc(0, idx, blk, trace.StackID(i%512))
		p.Step(idx, &e)
		idx++
	}
	for i, blk := range blocks {
		p.Free(0, idx, blk, trace.StackID(i%512))
		profiler.Observe(p, 0, allocator.TraceEntry{Action: allocator.ActionFreeCompleted, Addr: blk.Addr()})
		p.Step(idx, &e)
		idx++
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % n
		blk := blocks[k]
		p.Alloc(0, idx, blk, trace.StackID(k%512))
		p.Step(idx, &e)
		idx++
		p.Free(0, idx, blk, trace.StackID(k%512))
		profiler.Observe(p, 0, allocator.TraceEntry{Action: allocator.ActionFreeRequested, Addr: blk.Addr(), Size: blk.RequestedSize()})
		profiler.Observe(p, 0, allocator.TraceEntry{Action: allocator.ActionFreeCompleted, Addr: blk.Addr(), Size: blk.RequestedSize()})
		p.Step(idx, &e)
		idx++
	}
	b.StopTimer()
	if prof := p.Finish(); prof.Total.Allocs != uint64(n+b.N) {
		b.Fatalf("allocs %d, want %d", prof.Total.Allocs, n+b.N)
	}
}

// BenchmarkMallocFree puts the recorder's cost beside the allocator's: a
// cached malloc and free of one of 64 live-set sizes, with and without the
// profiler attached (its observer included).
func BenchmarkMallocFree(b *testing.B) {
	for _, withProfiler := range []bool{false, true} {
		name := "bare"
		if withProfiler {
			name = "profiled"
		}
		b.Run(name, func(b *testing.B) {
			proc, a := newAllocator(b, 64<<30, "", 0)
			var p *profiler.Profiler
			if withProfiler {
				p = profiler.New(nil, profiler.Options{})
				p.Attach(0, a, proc)
			}
			e := trace.Event{Action: trace.ActionAlloc}
			var idx int64
			live := make([]*allocator.Block, 64)
			for i := range live {
				blk, err := a.Malloc(uint64(512<<(i%12)), 0)
				if err != nil {
					b.Fatal(err)
				}
				live[i] = blk
				if p != nil {
					p.Alloc(0, idx, blk, trace.StackID(i))
					p.Step(idx, &e)
					idx++
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % len(live)
				old := live[k]
				if p != nil {
					p.Free(0, idx, old, trace.StackID(k))
				}
				if err := a.Free(old); err != nil {
					b.Fatal(err)
				}
				if p != nil {
					p.Step(idx, &e)
					idx++
				}
				blk, err := a.Malloc(old.Size(), 0)
				if err != nil {
					b.Fatal(err)
				}
				live[k] = blk
				if p != nil {
					p.Alloc(0, idx, blk, trace.StackID(k))
					p.Step(idx, &e)
					idx++
				}
			}
		})
	}
}

// BenchmarkReplay measures a whole replay of a recorded training-like
// workload (about 300k events over 200 sites), bare and with the profiler,
// and reports events per second.
func BenchmarkReplay(b *testing.B) {
	tr := recordedWorkload(b)
	for _, withProfiler := range []bool{false, true} {
		name := "bare"
		if withProfiler {
			name = "profiled"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				opts := replay.Options{Name: "bench"}
				var p *profiler.Profiler
				if withProfiler {
					p = profiler.New(tr.Stacks, profiler.Options{ExpectedEvents: int64(len(tr.Events))})
					opts.Recorder = p
				}
				res, err := replay.Run(tr.NewReader(), opts)
				if err != nil {
					b.Fatal(err)
				}
				if p != nil {
					p.Finish()
				}
				if res.Events != int64(len(tr.Events)) {
					b.Fatalf("replayed %d of %d events", res.Events, len(tr.Events))
				}
			}
			b.ReportMetric(float64(len(tr.Events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

var (
	workloadOnce  sync.Once
	workloadTrace *trace.Trace
)

// recordedWorkload records, once, a training-like loop: long-lived weights,
// then iterations of activations of varied sizes freed in reverse order and
// scratch buffers freed at once, from 200 sites.
func recordedWorkload(b *testing.B) *trace.Trace {
	workloadOnce.Do(func() {
		proc, a := newAllocator(b, 80<<30, "", 0)
		_ = proc
		st := trace.NewStacks()
		var sites []trace.StackID
		for i := 0; i < 200; i++ {
			sites = append(sites, st.Intern([]trace.Frame{{Name: fmt.Sprintf("layer%d", i), Filename: "model.py", Line: int64(i)}}))
		}
		tr := &trace.Trace{Header: trace.Header{Source: "memreplay", Devices: []trace.Device{{Index: 0, Capacity: 80 << 30}}}, Stacks: st}
		rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
		rng := rand.New(rand.NewPCG(7, 7))
		malloc := func(size uint64, site int) *allocator.Block {
			rec.SetStack(sites[site%len(sites)])
			blk, err := a.Malloc(size, 0)
			if err != nil {
				b.Fatal(err)
			}
			return blk
		}
		for i := 0; i < 50; i++ {
			malloc(uint64(8+rng.IntN(64))<<20, i)
		}
		for it := 0; len(tr.Events) < 300000; it++ {
			var acts []*allocator.Block
			for l := 0; l < 150; l++ {
				acts = append(acts, malloc(uint64(1+rng.IntN(4096))*4096, l))
				s := malloc(uint64(1+rng.IntN(512))*512, 150+l%50)
				if err := a.Free(s); err != nil {
					b.Fatal(err)
				}
			}
			for k := len(acts) - 1; k >= 0; k-- {
				if err := a.Free(acts[k]); err != nil {
					b.Fatal(err)
				}
			}
		}
		rec.Stop()
		workloadTrace = tr
	})
	return workloadTrace
}

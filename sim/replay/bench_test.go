package replay_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/memreplay/memreplay/internal/cputime"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// writeTrainingTrace writes a native trace of about n events shaped like a
// training job recorded from the start: parameters allocated once, then
// identical steps whose forward pass allocates 40 activations of distinct
// sizes up to 64 MiB (each with a short-lived temporary freed at once) and
// whose backward pass frees them in reverse, as PyTorch's traces of
// training loops show: after the first step almost every request is served
// from the cache. The
// addresses are those our own allocator would give; the replay does not
// need them to match, only to be consistent.
func writeTrainingTrace(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewWriter(f, trace.Header{Source: "memreplay", Devices: []trace.Device{{Index: 0, Capacity: 80 << 30}}})
	if err != nil {
		tb.Fatal(err)
	}
	st := trace.NewStacks()
	stacks := make([]trace.StackID, 64)
	for i := range stacks {
		stacks[i] = st.Intern([]trace.Frame{{Filename: "model.py", Line: int64(100 + i), Name: fmt.Sprintf("layer%d", i)},
			{Filename: "train.py", Line: 42, Name: "train_step"}})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]uint64, 48)
	for i := range sizes {
		sizes[i] = uint64(rng.IntN(64<<20)) + 1
	}
	next := uint64(0x7f0000000000)
	addr := func(size uint64) uint64 { a := next; next += (size + 511) &^ 511; return a }
	var e trace.Event
	now := int64(1_763_000_000_000_000)
	write := func(act trace.Action, a, size uint64, stack trace.StackID) {
		now += 1 + rng.Int64N(40) // recorded times jitter, as real ones do
		e = trace.Event{Action: act, Addr: a, Size: size, Stack: stack, TimeUS: now}
		if err := w.WriteEvent(&e, st); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < 200; i++ { // parameters
		s := sizes[i%len(sizes)]
		write(trace.ActionAlloc, addr(s), s, stacks[i%8])
	}
	written := 200
	type live struct{ a, s uint64 }
	var acts []live
	for written < n {
		for l := 0; l < 40 && written < n; l++ {
			s := sizes[l%len(sizes)]
			a := addr(s)
			write(trace.ActionAlloc, a, s, stacks[8+l%56])
			acts = append(acts, live{a, s})
			t := sizes[(l*7+3)%len(sizes)]/4 + 1
			ta := addr(t)
			write(trace.ActionAlloc, ta, t, stacks[8+(l+1)%56])
			write(trace.ActionFreeRequested, ta, t, 0)
			write(trace.ActionFreeCompleted, ta, t, 0)
			written += 4
		}
		for len(acts) > 0 {
			x := acts[len(acts)-1]
			acts = acts[:len(acts)-1]
			write(trace.ActionFreeRequested, x.a, x.s, 0)
			write(trace.ActionFreeCompleted, x.a, x.s, 0)
			written += 2
		}
		next = 0x7f0000000000 + 200*(64<<20) // reuse addresses step after step
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// processCPU is the process's CPU time so far, 0 where it is not measured
// (the cpu-events/s metric is then left out).
func processCPU() time.Duration {
	d, _ := cputime.Process()
	return d
}

func benchReplay(b *testing.B, n int, profile bool) {
	path := filepath.Join(b.TempDir(), "train.mrt")
	writeTrainingTrace(b, path, n)
	st, _ := os.Stat(path)
	b.ResetTimer()
	cpu0 := processCPU()
	var events int64
	var heap uint64
	for i := 0; i < b.N; i++ {
		r, f := openNative(b, path)
		opts := replay.Options{}
		var prof *profiler.Profiler
		if profile {
			prof = profiler.New(r.Stacks(), profiler.Options{ExpectedEvents: int64(n)})
			opts.Recorder = prof
		}
		res, err := replay.Run(r, opts)
		if err != nil {
			b.Fatal(err)
		}
		if prof != nil {
			prof.Finish()
		}
		events += res.Events
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapInuse)
		f.Close()
	}
	// On a shared machine the wall time moves with the load; the
	// process's CPU time (user + system, the runtime's own threads
	// included) much less, so both are reported.
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(events)/cpu.Seconds(), "cpu-events/s")
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(st.Size())/float64(n), "file-bytes/event")
}

// BenchmarkReplay1M and BenchmarkReplay10M stream a native trace of 1 and
// 10 million events through the replay on the simulated device (issue
// target: 5 million events/s on the 2-core dev machine, memory bounded by
// live blocks); the Profiled variants attach the profiler, as `memreplay
// replay` does. bench/replay.sh runs them.
func BenchmarkReplay1M(b *testing.B)          { benchReplay(b, 1_000_000, false) }
func BenchmarkReplay10M(b *testing.B)         { benchReplay(b, 10_000_000, false) }
func BenchmarkReplay1MProfiled(b *testing.B)  { benchReplay(b, 1_000_000, true) }
func BenchmarkReplay10MProfiled(b *testing.B) { benchReplay(b, 10_000_000, true) }

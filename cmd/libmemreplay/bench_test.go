package main

// The cost of the C boundary on a cached malloc+free pair (figures in
// docs/libmemreplay.md):
//
//	BenchmarkAllocatorPair       allocator.Malloc + Free on the fake driver's Device: the allocator alone
//	BenchmarkLibraryPair         the library's Go side (lib.go) as the exports call it: + the device's lock, pointer table, device lookup
//	BenchmarkExportedPair        memreplay_malloc + memreplay_free called from C (the harness, a separate process)
//	BenchmarkExportedCall        memreplay_init(1) from C: one bare C -> Go -> C call
//	BenchmarkGlibcPair           glibc's malloc + free of the same size in the harness: the baseline
//
// ExportedPair - LibraryPair is what the C boundary adds per pair (since
// frees are deferred, freequeue.go, one call and a push); ExportedCall is
// one call of it. The Exported benchmarks run the harness once with b.N
// pairs and report the time the harness measured inside its loop
// (clock_gettime), not the process's: the wall time as ns/op, and the
// calling threads' CPU time as cpu-ns/op, which does not count the time
// they waited for a CPU and moves less with the machine's load.

import (
	"strconv"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/cuda"
)

const benchSize = 1000 // a small-pool block, cached after the first pair

func BenchmarkAllocatorPair(b *testing.B) {
	drv, err := openFake(b)()
	if err != nil {
		b.Fatal(err)
	}
	gpu, err := drv.Device(0)
	if err != nil {
		b.Fatal(err)
	}
	defer gpu.Close()
	a := newBenchAllocator(b, gpu)
	for b.Loop() {
		blk, err := a.Malloc(benchSize, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchAllocator(b *testing.B, gpu *cuda.Device) *allocator.Allocator {
	l, _ := newTestLib(b, "", nil)
	a, err := allocator.New(gpu, l.opt.cfg)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func benchLibrary(b *testing.B, record bool) {
	l, _ := newTestLib(b, "", func(o *options) { o.record = record })
	for b.Loop() {
		p, err := l.malloc(benchSize, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.free(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLibraryPair(b *testing.B)          { benchLibrary(b, false) }
func BenchmarkLibraryPairRecording(b *testing.B) { benchLibrary(b, true) }

// BenchmarkLibraryPairParallel runs pairs from GOMAXPROCS goroutines on
// one device: they share its lock, which guards the allocator and the
// device's pointer table.
func BenchmarkLibraryPairParallel(b *testing.B) {
	l, _ := newTestLib(b, "", nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := l.malloc(benchSize, 0, 0)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.free(p); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchHarness runs one harness command with b.N (at least 1000) as its
// count and reports the harness's own per-iteration times: wall as ns/op,
// CPU as cpu-ns/op (its line's last two fields).
func benchHarness(b *testing.B, cmd string, env ...string) {
	// Build what the harness needs before the clock runs: the build took
	// the first b.N=1 round past the bench time, and the benchmark
	// stopped there with 1000 pairs.
	needFake(b)
	needShared(b)
	needHarness(b)
	b.ResetTimer()
	n := max(b.N, 1000)
	line := strings.ReplaceAll(cmd, "N", strconv.Itoa(n))
	r := runHarness(b, harnessEnv(b, 1<<30, env...), line)
	fields := strings.Fields(r.lines[len(r.lines)-1])
	if len(fields) < 2 {
		b.Fatalf("harness said %q", r.lines)
	}
	ns, err1 := strconv.ParseFloat(fields[len(fields)-2], 64)
	cpu, err2 := strconv.ParseFloat(fields[len(fields)-1], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("harness said %q", r.lines)
	}
	b.ReportMetric(ns, "ns/op")
	b.ReportMetric(cpu, "cpu-ns/op")
}

func BenchmarkExportedPair(b *testing.B) { benchHarness(b, "bench N 1000") }
func BenchmarkExportedPairRecording(b *testing.B) {
	benchHarness(b, "bench N 1000", "MEMREPLAY_RECORD=1")
}
func BenchmarkExportedCall(b *testing.B) { benchHarness(b, "benchcall N") }
func BenchmarkGlibcPair(b *testing.B)    { benchHarness(b, "benchlibc N 1000") }

// BenchmarkExportedPairThreads is 2 C threads calling at once; ns/op is the
// wall time per pair over both.
func BenchmarkExportedPairThreads(b *testing.B) { benchHarness(b, "benchmt 2 N 1000") }

// BenchmarkExportedCallThreads is 2 C threads making bare calls into Go at
// once (memreplay_init, as ExportedCall): the crossing's own cost across
// threads, apart from the device's lock (docs/performance.md, "The C ABI
// from many threads").
func BenchmarkExportedCallThreads(b *testing.B) { benchHarness(b, "benchmt 2 N 0") }

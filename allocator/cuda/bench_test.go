package cuda

// Benchmarks of the cost of reaching the driver through cgo, on the fake
// driver (whose calls do almost nothing but take a mutex, plus the mmap
// system calls behind malloc and free). Figures are in docs/cuda.md.

import (
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
)

// BenchmarkMemGetInfo is the floor: one cgo call into mr_do, which makes
// two driver calls (cuCtxGetCurrent, cuMemGetInfo_v2) that do nothing but
// lock.
func BenchmarkMemGetInfo(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	for b.Loop() {
		if _, _, err := d.MemGetInfo(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemGetInfoInC is BenchmarkMemGetInfo's loop run inside C: the
// difference between the two is the cost of the cgo transition (and of the
// Device's Go side: the closed check, result conversion).
func BenchmarkMemGetInfoInC(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	b.ResetTimer()
	if rc := d.lib.repeat(d.ctx, b.N, 0); rc != 0 {
		b.Fatal(d.lib.deviceError(opMemInfo, rc, stepCall))
	}
}

// BenchmarkMallocFreeInC is BenchmarkMallocFree's loop inside C.
func BenchmarkMallocFreeInC(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	b.ResetTimer()
	if rc := d.lib.repeat(d.ctx, b.N, 2<<20); rc != 0 {
		b.Fatal(d.lib.deviceError(opMalloc, rc, stepCall))
	}
}

// BenchmarkMallocFree is one cuMemAlloc_v2 and one cuMemFree_v2 of 2 MiB
// per iteration: two cgo calls plus the fake's mprotect and mmap.
func BenchmarkMallocFree(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	for b.Loop() {
		p, err := d.Malloc(2 << 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMallocFreeParallel is the same from all Ps at once; the fake
// serialises on its lock, as the driver does on its own.
func BenchmarkMallocFreeParallel(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := d.Malloc(2 << 20)
			if err != nil {
				b.Error(err)
				return
			}
			if err := d.Free(p); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEventRecordSync is what a record_stream free costs the
// device: record (from the pool) and a wait for it (cuEventSynchronize).
func BenchmarkEventRecordSync(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	for b.Loop() {
		e, err := d.RecordEvent(1)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.SynchronizeEvent(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocatorCached is the allocator's malloc+free of a cached
// block on the cuda device: no device call at all once warm, so it is the
// same as on sim.
func BenchmarkAllocatorCached(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	a, err := allocator.New(d, config.Default())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		blk, err := a.Malloc(1<<20, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExpandableGrowShrink maps and unmaps one 20 MiB page per
// iteration through the allocator: cuMemCreate, cuMemMap, cuMemSetAccess,
// then on empty_cache cuStreamSynchronize, cuMemUnmap, cuMemRelease.
func BenchmarkExpandableGrowShrink(b *testing.B) {
	d := needFake(b, 1<<30, 0, 0).device()
	cfg, err := config.Parse("expandable_segments:True")
	if err != nil {
		b.Fatal(err)
	}
	a, err := allocator.New(d, cfg)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		blk, err := a.Malloc(20<<20, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
		if err := a.EmptyCache(); err != nil {
			b.Fatal(err)
		}
	}
}

package allocator_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// Benchmarks of the allocator's hot path on the simulated device. The
// figures and the command that produced them are in docs/allocator.md.

func benchAllocator(b *testing.B, conf string, opts ...allocator.Option) (*allocator.Allocator, *gpu.Process) {
	_, proc, a, _ := simAllocator(b, gpu.Options{Capacity: 80 << 30, NoContextOverhead: true}, conf, opts...)
	return a, proc
}

// fill allocates n live blocks of size bytes and frees the one in the
// middle, leaving an exact-size hole between two live neighbours: a cached
// block that malloc finds and that free returns without merging.
func fill(b *testing.B, a *allocator.Allocator, n int, size uint64) {
	b.Helper()
	var mid *allocator.Block
	for i := 0; i <= n; i++ {
		blk, err := a.Malloc(size, 0)
		if err != nil {
			b.Fatal(err)
		}
		if i == n/2 {
			mid = blk
		}
	}
	if err := a.Free(mid); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMallocFreeCacheHit is one malloc and one free of a cached block
// with 10,000 live blocks in the pools, under each policy (PyTorch's first,
// under its bare name). One op = the pair.
func BenchmarkMallocFreeCacheHit(b *testing.B) {
	for _, policy := range allocator.PolicyNames() {
		pol, err := allocator.NewPolicy(policy)
		if err != nil {
			b.Fatal(err)
		}
		prefix := policy + "/"
		if policy == "pytorch" {
			prefix = ""
		}
		benchCacheHit(b, prefix, "", allocator.WithPolicy(pol))
	}
	// PyTorch's expandable segments, the path stitch runs on.
	benchCacheHit(b, "expandable/", "expandable_segments:True", allocator.WithPolicy(allocator.PyTorch{}))
}

func benchCacheHit(b *testing.B, prefix, conf string, opt allocator.Option) {
	for _, c := range []struct {
		name string
		size uint64
	}{{"small", 4096}, {"large", 4 << 20}} {
		b.Run(prefix+c.name, func(b *testing.B) {
			a, _ := benchAllocator(b, conf, opt)
			fill(b, a, 10000, c.size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				blk, err := a.Malloc(c.size, 0)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Free(blk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMallocFreeSplit: the cached block is twice the request, so every
// malloc splits it and every free merges the halves again.
func BenchmarkMallocFreeSplit(b *testing.B) {
	a, _ := benchAllocator(b, "")
	fill(b, a, 10000, 8192)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blk, err := a.Malloc(4096, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMallocFreeSplitMerge is the C ABI's pair (cmd/libmemreplay's
// AllocatorPair without the lock): a 1000-byte malloc carved from a free
// small-pool block and its free merging the halves back. "segment": the
// block is a whole 2 MiB segment and the pool holds nothing else;
// "crowded": it is the lowest of 5,000 free 4 KiB holes between 5,000 live
// blocks, beside free blocks of 100 other sizes, so that best fit searches
// a full free set. One op = the pair.
func BenchmarkMallocFreeSplitMerge(b *testing.B) {
	b.Run("segment", func(b *testing.B) {
		a, _ := benchAllocator(b, "", allocator.WithoutLocking())
		benchPair(b, a, 1000)
	})
	b.Run("crowded", func(b *testing.B) {
		a, _ := benchAllocator(b, "", allocator.WithoutLocking())
		var holes []*allocator.Block
		for i := 0; i < 10000; i++ {
			size := uint64(4096)
			if i%4 == 3 {
				size = uint64(8192 + 512*(i%100)) // other sizes, freed too
			}
			blk, err := a.Malloc(size, 0)
			if err != nil {
				b.Fatal(err)
			}
			if i%2 == 1 {
				holes = append(holes, blk)
			}
		}
		for _, blk := range holes {
			if err := a.Free(blk); err != nil {
				b.Fatal(err)
			}
		}
		benchPair(b, a, 1000)
	})
}

func benchPair(b *testing.B, a *allocator.Allocator, size uint64) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blk, err := a.Malloc(size, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMixedWorkload replays a training-step-like pattern: a burst of
// activations of many sizes allocated in order and freed in reverse, with
// parameters and optimizer state live throughout. One op = one malloc and
// its free.
func BenchmarkMixedWorkload(b *testing.B) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		name := "default"
		if conf != "" {
			name = "expandable"
		}
		b.Run(name, func(b *testing.B) {
			a, _ := benchAllocator(b, conf)
			r := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 2000; i++ { // weights and optimizer state
				if _, err := a.Malloc(uint64(r.IntN(8<<20))+512, 0); err != nil {
					b.Fatal(err)
				}
			}
			sizes := make([]uint64, 512)
			for i := range sizes {
				switch r.IntN(4) {
				case 0:
					sizes[i] = uint64(r.IntN(1<<20)) + 1
				case 1, 2:
					sizes[i] = uint64(r.IntN(12<<20)) + 1
				default:
					sizes[i] = uint64(r.IntN(64<<20)) + 1
				}
			}
			stack := make([]*allocator.Block, 0, len(sizes))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				for _, s := range sizes {
					blk, err := a.Malloc(s, 0)
					if err != nil {
						b.Fatal(err)
					}
					stack = append(stack, blk)
				}
				for len(stack) > 0 {
					if err := a.Free(stack[len(stack)-1]); err != nil {
						b.Fatal(err)
					}
					stack = stack[:len(stack)-1]
				}
				i += len(sizes)
			}
		})
	}
}

// BenchmarkMallocFreeParallel measures the lock under contention: every
// goroutine takes and returns its own cached block.
func BenchmarkMallocFreeParallel(b *testing.B) {
	a, _ := benchAllocator(b, "")
	fill(b, a, 10000, 4096)
	var once sync.Once
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			blk, err := a.Malloc(4096, 0)
			if err != nil {
				once.Do(func() { b.Error(err) })
				return
			}
			if err := a.Free(blk); err != nil {
				once.Do(func() { b.Error(err) })
				return
			}
		}
	})
}

// BenchmarkPlannedMallocFree is the plan policy's planned path: a step of
// 16 blocks (mixed sizes, all live at the step's peak) repeated until the
// plan serves it from its arena, then one malloc and one free of the step
// per op, each served at its planned offset.
func BenchmarkPlannedMallocFree(b *testing.B) {
	pol, err := allocator.NewPolicy("plan")
	if err != nil {
		b.Fatal(err)
	}
	a, _ := benchAllocator(b, "", allocator.WithPolicy(pol))
	sizes := make([]uint64, 16)
	for i := range sizes {
		sizes[i] = uint64(1+i%5) << 20
	}
	blocks := make([]*allocator.Block, len(sizes))
	i := 0
	// op runs the next request of the step: the first half of the ops
	// allocate the step's blocks, the second half frees them, last first.
	op := func() {
		k := i % (2 * len(sizes))
		i++
		if k < len(sizes) {
			blk, err := a.Malloc(sizes[k], 0)
			if err != nil {
				b.Fatal(err)
			}
			blocks[k] = blk
			return
		}
		if err := a.Free(blocks[2*len(sizes)-1-k]); err != nil {
			b.Fatal(err)
		}
	}
	for s := 0; s < 6*2*len(sizes); s++ {
		op()
	}
	if s, _ := a.PlanStats(); s.Arena == 0 {
		b.Fatalf("%+v: no arena after 6 steps", s)
	}
	before, _ := a.PlanStats()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		op()
		op()
	}
	b.StopTimer()
	after, _ := a.PlanStats()
	if after.Missed != before.Missed || after.Abandoned != 0 || after.Served == before.Served {
		b.Fatalf("before %+v, after %+v: not served from the plan", before, after)
	}
}

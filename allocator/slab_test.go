package allocator_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// growToPeak allocates n blocks of many sizes in both pools (so that
// segments split into many blocks and the free sets hold many sizes), frees
// every third, then frees the rest, and returns how many heap objects that
// made.
func growToPeak(t *testing.T, a *allocator.Allocator, n int) uint64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	live := make([]*allocator.Block, 0, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		size := uint64(rng.IntN(2048)+1) * 512 // up to 1 MiB: the small pool
		if i%4 == 0 {
			size = uint64(rng.IntN(64)+2) << 20 // the large pool, split in 20 MiB segments
		}
		b, err := a.Malloc(size, 0)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, b)
	}
	for i := 0; i < n; i += 3 {
		if err := a.Free(live[i]); err != nil {
			t.Fatal(err)
		}
		live[i] = nil
	}
	for _, b := range live {
		if b != nil {
			if err := a.Free(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// A fresh allocator growing to thousands of blocks takes its blocks,
// segments and free-set nodes from chunks: a few dozen heap objects, where
// one per block and per free size made several thousand (issue 19).
func TestGrowingToPeakAllocatesInChunks(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate on their own")
	}
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 80 << 30, NoContextOverhead: true}, "")
	const n = 4000
	objs := growToPeak(t, a, n)
	t.Logf("%d heap objects for %d blocks", objs, n)
	if objs > n/10 {
		t.Errorf("growing to %d blocks made %d heap objects, want at most %d", n, objs, n/10)
	}
}

// Blocks and free-set nodes are recycled and carved from shared chunks, so
// a block handed out must never be one a caller still holds: over random
// mallocs and frees with the invariant checks on, every Malloc returns an
// object no live block is, and every live block keeps its address and size
// until its Free.
func TestRecycledBlocksAreNeverLive(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True", "max_split_size_mb:40"} {
		t.Run(conf, func(t *testing.T) {
			_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 80 << 30, NoContextOverhead: true}, conf,
				allocator.WithInvariantChecks())
			rng := rand.New(rand.NewPCG(5, 6))
			type want struct{ addr, size uint64 }
			live := map[*allocator.Block]want{}
			var order []*allocator.Block
			for step := 0; step < 6000; step++ {
				if len(order) == 0 || (len(order) < 800 && rng.IntN(10) < 6) {
					size := uint64(rng.IntN(4096)+1) * 512
					if rng.IntN(8) == 0 {
						size = uint64(rng.IntN(40)+1) << 20
					}
					b, err := a.Malloc(size, allocator.Stream(rng.IntN(2)))
					if err != nil {
						t.Fatal(err)
					}
					if _, dup := live[b]; dup {
						t.Fatalf("step %d: Malloc returned a block that is still live", step)
					}
					live[b] = want{b.Addr(), b.Size()}
					order = append(order, b)
				} else {
					i := rng.IntN(len(order))
					b := order[i]
					order[i] = order[len(order)-1]
					order = order[:len(order)-1]
					if w := live[b]; b.Addr() != w.addr || b.Size() != w.size {
						t.Fatalf("step %d: live block changed from %#x+%d to %#x+%d", step, w.addr, w.size, b.Addr(), b.Size())
					}
					delete(live, b)
					if err := a.Free(b); err != nil {
						t.Fatal(err)
					}
				}
				if step%1000 == 0 {
					if err := a.EmptyCache(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for b, w := range live {
				if b.Addr() != w.addr || b.Size() != w.size {
					t.Fatalf("live block changed from %#x+%d to %#x+%d", w.addr, w.size, b.Addr(), b.Size())
				}
			}
		})
	}
}

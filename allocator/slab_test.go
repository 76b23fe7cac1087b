package allocator_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
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

// discardScript runs a fixed mix of mallocs, record_streams and frees on
// a (many sizes, two streams, both pools; about 3,000 blocks at the peak)
// and returns each malloc's address and size and the heap bytes it took.
func discardScript(t *testing.T, a *allocator.Allocator) (got [][2]uint64, heap uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	got = make([][2]uint64, 0, 9000)
	live := make([]*allocator.Block, 0, 9000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for step := 0; step < 9000; step++ {
		if len(live) == 0 || (step < 5000 && rng.IntN(10) < 8) || rng.IntN(10) < 3 {
			size := uint64(rng.IntN(2048)+1) * 512
			if rng.IntN(6) == 0 {
				size = uint64(rng.IntN(40)+1) << 20
			}
			b, err := a.Malloc(size, allocator.Stream(rng.IntN(2)))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, [2]uint64{b.Addr(), b.Size()})
			live = append(live, b)
			continue
		}
		i := rng.IntN(len(live))
		b := live[i]
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
		if step%1000 == 0 {
			// The checks allocate: their bytes are not the script's.
			runtime.ReadMemStats(&after)
			heap += after.TotalAlloc - before.TotalAlloc
			if err := a.CheckInvariants(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			runtime.ReadMemStats(&before)
		}
	}
	runtime.ReadMemStats(&after)
	return got, heap + after.TotalAlloc - before.TotalAlloc
}

// A discarded allocator's Blocks serve the allocators made after it
// (sim/workers discards each exited process's): a second allocator
// running the same script takes fewer heap bytes than the first, and
// makes exactly the same decisions, its invariants checked as it goes, although
// its Blocks are the memory of blocks that were live, split, merged and
// record_stream'd in the discarded one. The discarded allocator refuses
// every later call.
func TestDiscardHandsBlocksToTheNextAllocator(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate on their own")
	}
	allocator.DrainChunkPools()
	opts := gpu.Options{Capacity: 80 << 30, NoContextOverhead: true}
	_, _, fresh, _ := simAllocator(t, opts, "")
	want, freshHeap := discardScript(t, fresh)

	_, proc, old, _ := simAllocator(t, opts, "")
	growToPeak(t, old, 3000) // every block freed again, and merged
	var held []*allocator.Block
	for i := 0; i < 2000; i++ {
		b, err := old.Malloc(uint64(i%700+1)*4096, allocator.Stream(i%3))
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := old.RecordStream(b, 9); err != nil {
				t.Fatal(err)
			}
		}
		held = append(held, b)
	}
	for i := 0; i < len(held); i += 10 {
		if err := old.Free(held[i]); err != nil { // some wait for stream 9
			t.Fatal(err)
		}
	}
	proc.Close()
	old.Discard()
	if _, err := old.Malloc(4096, 0); err != allocator.ErrDiscarded {
		t.Errorf("Malloc after Discard: %v, want ErrDiscarded", err)
	}
	if err := old.EmptyCache(); err != allocator.ErrDiscarded {
		t.Errorf("EmptyCache after Discard: %v, want ErrDiscarded", err)
	}

	_, _, next, _ := simAllocator(t, opts, "")
	got, nextHeap := discardScript(t, next)
	t.Logf("heap bytes: %d fresh, %d after a discard", freshHeap, nextHeap)
	if len(got) != len(want) {
		t.Fatalf("%d mallocs after a discard, %d fresh", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("malloc %d: %#x+%d after a discard, %#x+%d fresh", i, got[i][0], got[i][1], want[i][0], want[i][1])
		}
	}
	// The Blocks, segments, buckets and size nodes are half of the
	// script's bytes; without the pools the two figures are equal.
	if nextHeap > freshHeap*3/5 {
		t.Errorf("after a discard the script took %d heap bytes, fresh %d: want 40%% less at least", nextHeap, freshHeap)
	}
}

// Allocators made and discarded on several goroutines at once share the
// chunk pools (a sweep runs its mixes so): run under -race, this checks
// their locking; each allocator's blocks stay its own throughout.
func TestDiscardConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				card, err := gpu.New(gpu.Options{Capacity: 8 << 30, NoContextOverhead: true})
				if err != nil {
					t.Error(err)
					return
				}
				proc, err := card.NewProcess()
				if err != nil {
					t.Error(err)
					return
				}
				a, err := allocator.New(proc, config.Default(), allocator.WithInvariantChecks())
				if err != nil {
					t.Error(err)
					return
				}
				var live []*allocator.Block
				for i := 0; i < 300; i++ {
					b, err := a.Malloc(uint64(i%97+1)*4096, 0)
					if err != nil {
						t.Error(err)
						return
					}
					live = append(live, b)
				}
				for i, b := range live {
					if i%2 == 0 {
						if err := a.Free(b); err != nil {
							t.Error(err)
							return
						}
					}
				}
				a.Discard()
				proc.Close()
			}
		}()
	}
	wg.Wait()
}

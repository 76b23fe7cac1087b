package allocator_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// TestConcurrentCallers runs several goroutines against one allocator (as
// the threads of one training process do), each on its own stream and with
// its own live set, plus one that empties the cache now and then. Run under
// -race; the invariant checks after every call catch any interleaving that
// corrupts the pools, and the end state must account for every byte.
func TestConcurrentCallers(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run("conf="+conf, func(t *testing.T) {
			_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 2 << 30, NoContextOverhead: true, EventsCompleteImmediately: true},
				conf, allocator.WithInvariantChecks())
			var traced sync.Map
			a.AddObserver(func(e allocator.TraceEntry) { traced.Store(e.Action, true) })

			const workers = 4
			var wg sync.WaitGroup
			errs := make(chan error, workers+1)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 7))
					stream := allocator.Stream(w)
					var live []*allocator.Block
					for i := 0; i < 400; i++ {
						if len(live) > 0 && r.IntN(3) == 0 {
							j := r.IntN(len(live))
							if r.IntN(4) == 0 {
								if err := a.RecordStream(live[j], allocator.Stream(r.IntN(workers))); err != nil {
									errs <- err
									return
								}
							}
							if err := a.Free(live[j]); err != nil {
								errs <- err
								return
							}
							live[j] = live[len(live)-1]
							live = live[:len(live)-1]
							continue
						}
						b, err := a.Malloc(uint64(r.IntN(24<<20))+1, stream)
						if errors.Is(err, allocator.ErrOutOfMemory) {
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						live = append(live, b)
					}
					for _, b := range live {
						if err := a.Free(b); err != nil {
							errs <- err
							return
						}
					}
				}(w)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if err := a.EmptyCache(); err != nil {
						errs <- err
						return
					}
					_ = a.Snapshot()
					_ = a.Stats()
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if err := a.ProcessEvents(); err != nil {
				t.Fatal(err)
			}
			st := a.Stats()
			if n := st.Allocation[allocator.StatAll].Current; n != 0 {
				t.Fatalf("%d allocations left after every worker freed its blocks", n)
			}
			if st.Allocation[allocator.StatAll].Allocated < workers*100 {
				t.Fatalf("only %d allocations made", st.Allocation[allocator.StatAll].Allocated)
			}
			if _, ok := traced.Load(allocator.ActionAlloc); !ok {
				t.Fatal("observer saw no alloc entry")
			}
		})
	}
}

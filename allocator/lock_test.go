package allocator_test

import (
	"testing"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// An observer runs inside Malloc, under the allocator's lock when it takes
// one. Under WithoutLocking it takes none, so the observer may call back
// into the allocator (Stats takes the lock too): that returns at once
// instead of deadlocking on a mutex its own call holds. With the lock, the
// same callback blocks, which is how the test tells the two apart.
func TestWithoutLockingTakesNoLock(t *testing.T) {
	run := func(opts ...allocator.Option) bool {
		_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "", opts...)
		inner := make(chan allocator.Stats, 1) // the observer's Stats, proof it returned
		a.AddObserverFor(allocator.Actions(allocator.ActionAlloc), func(allocator.TraceEntry) {
			inner <- a.Stats()
		})
		done := make(chan error, 1)
		go func() {
			_, err := a.Malloc(4096, 0)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			<-inner
			return true
		case <-time.After(2 * time.Second):
			return false // blocked on the lock its own Malloc holds
		}
	}
	if !run(allocator.WithoutLocking()) {
		t.Fatal("under WithoutLocking, a call from inside Malloc blocked: Malloc took the lock")
	}
	if run() {
		t.Fatal("without WithoutLocking, a call from inside Malloc did not block: Malloc took no lock")
	}
}

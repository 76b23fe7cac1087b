package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{0, 64 * mib, 1600},         // nothing measured: the minimum heap, 4 MiB x 16
		{1 * mib, 64 * mib, 1600},   // a small heap: the minimum heap again, not 1 MiB x 64
		{4 * mib, 64 * mib, 1500},   // goal 4 + 60 = 64 MiB
		{16 * mib, 64 * mib, 300},   // goal 64 MiB
		{31 * mib, 64 * mib, 106},   // just under half the floor
		{32 * mib, 64 * mib, 100},   // half the floor: Go's default
		{200 * mib, 64 * mib, 100},  // a big heap collects as before
		{200 * mib, 512 * mib, 156}, // goal 512 MiB
	} {
		if got := Percent(c.live, c.floor); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
	}
}

// churn allocates n bytes of garbage in 4 KiB pieces and returns how many
// collections ran meanwhile.
func churn(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var keep []byte
	for i := 0; i < n/4096; i++ {
		keep = make([]byte, 4096)
	}
	_ = keep
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// With a 256 MiB floor, 128 MiB of short-lived garbage on a small live
// heap is collected at most once or twice (the first goal is set before
// anything was measured); with Go's default it is collected every few MiB.
// The tuner's finalizer runs at every collection and keeps the goal up.
func TestFloorCutsCollections(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 256 MiB")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// Go's default, the baseline, is measured up to three times: on a
	// busy machine one run counted only 3 completed cycles (the
	// collector's workers were starved while the churn ran on), which
	// says nothing about the floor. A floor that does not work fails
	// below whatever the baseline reads.
	var plain uint32
	for try := 0; try < 3 && plain < 10; try++ {
		runtime.GC()
		plain = max(plain, churn(128<<20))
	}

	tu := start(256 << 20)
	defer tu.stopped.Store(true)
	runtime.GC() // a cycle with the tuner armed: it measures the live heap
	runtime.GC() // the finalizer has run by the next cycle at the latest
	floored := churn(128 << 20)
	if plain < 10 {
		t.Fatalf("Go's default collected %d times over 128 MiB of garbage; the test assumes many", plain)
	}
	if floored > 2 {
		t.Fatalf("with a 256 MiB floor, %d collections over 128 MiB of garbage (default: %d)", floored, plain)
	}
	if tu.cycles.Load() == 0 {
		t.Fatal("the tuner never ran after a collection")
	}
	if p := debug.SetGCPercent(100); p <= 100 {
		t.Fatalf("the tuner left GC percent %d on a small heap, want above 100", p)
	}
}

// The floor bounds the heap too: with a 32 MiB floor, 128 MiB of garbage
// on a small live heap is collected at least every 32 MiB or so. A first
// goal sized for a 1 MiB live heap (31 x 1 MiB over the runtime's 4 MiB
// minimum heap: 124 MiB) collected once or not at all.
func TestFloorStillCollects(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 128 MiB")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	tu := start(32 << 20)
	defer tu.stopped.Store(true)
	if n := churn(128 << 20); n < 3 {
		t.Fatalf("with a 32 MiB floor, %d collections over 128 MiB of garbage; want at least 3", n)
	}
}

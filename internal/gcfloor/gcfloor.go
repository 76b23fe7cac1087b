// Package gcfloor keeps the garbage collector of a short-lived command
// from running while its heap is small.
//
// Go's collector aims to start a cycle when the heap has grown by GOGC
// percent over what the last cycle left live, with a 4 MiB minimum. A
// command that reads a small trace, replays it and writes a report lives
// for tens of milliseconds and keeps a few MiB live, so with GOGC=100 it
// collects every few MiB it allocates: the real-snapshot corpus spent
// about a fifth of `memreplay report`'s CPU in the collector and its write
// barriers, for memory the process was about to hand back by exiting.
//
// The floor is a heap size below which there is no point collecting: the
// heap goal is max(floor, 2 × live). After every cycle, Set's tuner reads
// the live heap (runtime/metrics) and sets the GC percent that puts the
// next goal there: (floor - live) / live, but never under 100, which is
// Go's default and what a large heap gets. So a small run collects rarely
// or never, and a large one (a 1 GB snapshot keeps about 200 MB live)
// collects exactly as before: the peak is bounded by max(floor, 2 × live)
// plus what one cycle allocates, as with GOGC=100 above the floor.
//
// The tuner runs in a finalizer: a sentinel object that becomes garbage
// at once and whose finalizer, run after the cycle that found it dead,
// adjusts the percent and arms a new sentinel. That costs one small
// allocation per cycle and nothing between cycles. A user's own GOGC or
// GOMEMLIMIT setting wins: Set does nothing when either is in the
// environment.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Percent is the GC percent that makes the next heap goal the floor for
// a live heap of live bytes, or 100 when 2 × live is above the floor.
//
// The runtime's goal is live × (1 + percent/100), but never under its
// minimum heap, 4 MiB × percent/100 (runtime/mgcpacer.go, heapMinimum):
// so while the live heap is under 4 MiB (and before the first cycle, when
// nothing is measured) it is the minimum that must come to the floor, or
// a percent sized for a 1 MiB heap would let the first cycle wait for
// 64 times the floor.
func Percent(live, floor uint64) int {
	const minimum = 100
	const heapMinimum = 4 << 20
	if floor <= 2*max(live, heapMinimum/2) {
		return minimum
	}
	p := floor * 100 / heapMinimum
	if live > 0 {
		p = min(p, (floor-live)*100/live)
	}
	return int(max(p, minimum))
}

// sentinel is the object whose finalizer runs once per cycle. It holds a
// pointer so that it is not a tiny allocation (tiny objects share a block
// and their finalizers may never run).
type sentinel struct {
	t   *tuner
	pad [16]byte
}

type tuner struct {
	floor   uint64
	stopped atomic.Bool
	sample  []metrics.Sample
	cycles  atomic.Int64 // finalizer runs, for the tests
}

var liveMetric = "/gc/heap/live:bytes"

// Set starts the tuner with the given floor in bytes, unless GOGC or
// GOMEMLIMIT is set in the environment (then the user's setting holds and
// Set returns a no-op). stop ends the tuning and restores GOGC=100.
func Set(floor uint64) (stop func()) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		return func() {}
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return func() {}
	}
	t := start(floor)
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(100)
	}
}

func start(floor uint64) *tuner {
	t := &tuner{floor: floor, sample: []metrics.Sample{{Name: liveMetric}}}
	debug.SetGCPercent(Percent(0, floor))
	t.arm()
	return t
}

func (t *tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) { s.t.after() })
}

// after runs once per collection, on the finalizer goroutine.
func (t *tuner) after() {
	if t.stopped.Load() {
		return
	}
	t.cycles.Add(1)
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	debug.SetGCPercent(Percent(live, t.floor))
	t.arm()
}

package cputime

import (
	"runtime"
	"testing"
)

// Spinning for a while must show up as CPU time: a reader that returned a
// constant (or the wall clock of an idle process) would fail one side.
func TestProcessCountsWork(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("CPU time is not measured on " + runtime.GOOS)
	}
	x := uint64(1)
	for i := 0; i < 200_000_000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	after, _ := Process()
	if x == 0 || after-before < 10_000_000 { // 10 ms: the spin takes far more
		t.Fatalf("CPU time went from %v to %v over a busy loop", before, after)
	}
}

//go:build race

package packing_test

// trialsN shrinks the runs under the race detector, which makes them
// several times slower; the plain run keeps the full size.
func trialsN(n int) int { return max(10, n/4) }

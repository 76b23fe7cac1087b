//go:build race

package study

// trialsN shrinks the studies under the race detector, which makes them
// several times slower; the plain run keeps the full size.
func trialsN(n int) int { return max(6, n/4) }

// raceOn is true under the race detector.
const raceOn = true

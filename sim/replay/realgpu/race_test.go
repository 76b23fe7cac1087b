//go:build race

package realgpu_test

// raceEnabled shrinks the randomized tests under the race detector, which
// makes them ten times slower; the plain run (and CI's fuzz budget) keeps
// the full size.
const raceEnabled = true

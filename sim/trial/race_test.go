//go:build race

package trial

// raceEnabled shrinks the long tests under the race detector.
const raceEnabled = true

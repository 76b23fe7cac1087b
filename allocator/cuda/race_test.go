//go:build race

package cuda

// raceEnabled shrinks the randomized differential test under the race
// detector, which makes it several times slower.
const raceEnabled = true

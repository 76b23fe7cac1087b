//go:build !race

package realgpu_test

const raceEnabled = false

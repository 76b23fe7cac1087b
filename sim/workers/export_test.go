package workers

import "github.com/memreplay/memreplay/allocator"

// SetCheckInvariants switches the per-step bookkeeping checks (checkParked)
// on or off and returns the old setting: the package's tests run with them
// (invariants_test.go), its benchmarks without, as `memreplay par` runs.
func SetCheckInvariants(on bool) bool {
	old := checkInvariants
	checkInvariants = on
	return old
}

// OnDiscard makes f see each exited process's allocator, after its
// Discard, until the returned func is called.
func OnDiscard(f func(*allocator.Allocator)) (restore func()) {
	old := discarded
	discarded = f
	return func() { discarded = old }
}

package workers

// SetCheckInvariants switches the per-step bookkeeping checks (checkParked)
// on or off and returns the old setting: the package's tests run with them
// (invariants_test.go), its benchmarks without, as `memreplay par` runs.
func SetCheckInvariants(on bool) bool {
	old := checkInvariants
	checkInvariants = on
	return old
}

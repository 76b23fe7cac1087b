package workers

// The package's tests run with the run's bookkeeping checked after every
// step (checkParked).
func init() { checkInvariants = true }

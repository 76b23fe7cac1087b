package par

// SetMaxShardBytes lowers ReadShard's bound for a test; the returned
// function restores it.
func SetMaxShardBytes(n int64) (restore func()) {
	old := maxShardBytes
	maxShardBytes = n
	return func() { maxShardBytes = old }
}

package allocator

// WithColdFreeSets makes the allocator's free sets put every block in its
// bucket at once, keeping no hot blocks (freeset.go), for the tests that
// compare the two.
func WithColdFreeSets() Option { return func(a *Allocator) { a.coldFree = true } }

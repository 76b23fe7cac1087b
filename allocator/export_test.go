package allocator

// WithColdFreeSets makes the allocator's free sets put every block in its
// bucket at once, keeping no hot blocks (freeset.go), for the tests that
// compare the two.
func WithColdFreeSets() Option { return func(a *Allocator) { a.coldFree = true } }

// DrainBlockChunks empties the pool of discarded allocators' Block
// chunks, so that a test measures a fresh allocator's own.
func DrainBlockChunks() {
	for i := range blockChunks.class {
		for blockChunks.class[i].Get() != nil {
		}
	}
}

package allocator

// WithColdFreeSets makes the allocator's free sets put every block in its
// bucket at once, keeping no hot blocks (freeset.go), for the tests that
// compare the two.
func WithColdFreeSets() Option { return func(a *Allocator) { a.coldFree = true } }

// DrainChunkPools empties the pools of discarded allocators' chunks, so
// that a test measures a fresh allocator's own.
func DrainChunkPools() {
	drain(&blockChunks)
	drain(&segmentChunks)
	drain(&bucketChunks)
	drain(&sizeNodeChunks)
}

func drain[T any](p *chunkPool[T]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.class[:])
}

// CheckInvariants runs the allocator's invariant checks once.
func CheckInvariants(a *Allocator) error { return a.checkInvariants() }

// MarkFreedKeepingUses clears b's allocated flag and nothing else: what a
// free that forgot to turn b's uses of other streams into events would
// leave behind.
func MarkFreedKeepingUses(b *Block) { b.allocated = false }

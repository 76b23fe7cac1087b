package allocator

// FreeSummary reports the cached (free, mapped) bytes of both pools and the
// largest single free block: what external fragmentation is measured from
// (1 - largest/total). Blocks waiting on record-stream events are not free.
// It walks the free sets' bucket index, so it costs O(distinct free sizes):
// meant for sampling, not for every operation.
func (a *Allocator) FreeSummary() (total, largest uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pools {
		p.free.index.Descend(func(bk *bucket) bool {
			if n := uint64(len(bk.blocks)); n > 0 {
				total += n * bk.key.size
				largest = max(largest, bk.key.size)
			}
			return true
		})
	}
	return total, largest
}

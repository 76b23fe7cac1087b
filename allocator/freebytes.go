package allocator

// FreeSummary reports the cached (free, mapped) bytes of both pools and the
// largest single free block: what external fragmentation is measured from
// (1 - largest/total). Blocks waiting on record-stream events are not free.
// The free sets keep both figures as blocks come and go, so it costs
// O(distinct free sizes) at worst and usually O(1), however many streams
// hold free blocks.
func (a *Allocator) FreeSummary() (total, largest uint64) {
	if a.lock() {
		defer a.mu.Unlock()
	}
	for _, p := range a.pools {
		total += p.free.freeBytes()
		largest = max(largest, p.free.largest())
	}
	return total, largest
}

package allocator

// sizeCounts counts, per block size, the free set's non-empty buckets of
// that size over every stream, so that the largest free block is known
// without a walk over the streams (FreeSummary; a job may use thousands).
// The largest is kept as sizes come and go and found again, by a walk
// over the distinct sizes, only after the largest size's last bucket
// empties.
//
// Open addressing with linear probing, at most half full, deletion by
// backward shift: the counts change whenever a bucket empties or fills,
// on a cache hit's path, where a Go map's hashing cost more than the rest
// of the update.
type sizeCounts struct {
	slots []sizeSlot
	n     int
	shift uint8
	top   uint64 // the largest size counted, unless stale
	stale bool
}

type sizeSlot struct {
	size  uint64 // 0: empty (block sizes are at least 512)
	count int
}

func (c *sizeCounts) home(size uint64) int {
	return int((size * 0x9E3779B97F4A7C15) >> c.shift)
}

func (c *sizeCounts) inc(size uint64) {
	if c.n >= len(c.slots)/2 {
		c.grow()
	}
	mask := len(c.slots) - 1
	i := c.home(size)
	for c.slots[i].size != 0 && c.slots[i].size != size {
		i = (i + 1) & mask
	}
	if c.slots[i].size == 0 {
		c.slots[i].size = size
		c.n++
	}
	c.slots[i].count++
	if size > c.top {
		c.top = size
	}
}

func (c *sizeCounts) dec(size uint64) {
	mask := len(c.slots) - 1
	i := c.home(size)
	for c.slots[i].size != size {
		if c.slots[i].size == 0 {
			panic("allocator: free-set size count missing")
		}
		i = (i + 1) & mask
	}
	if c.slots[i].count--; c.slots[i].count > 0 {
		return
	}
	c.n--
	if size == c.top {
		c.stale = true
	}
	// Knuth's algorithm R: move later entries of the run back into the hole.
	for j := i; ; {
		c.slots[i] = sizeSlot{}
		for {
			j = (j + 1) & mask
			if c.slots[j].size == 0 {
				return
			}
			h := c.home(c.slots[j].size)
			// The entry at j may move to i unless its home lies
			// cyclically in (i, j].
			if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
				break
			}
		}
		c.slots[i] = c.slots[j]
		i = j
	}
}

// largest is the largest size counted, or 0.
func (c *sizeCounts) largest() uint64 {
	if c.stale {
		c.top = 0
		for _, s := range c.slots {
			c.top = max(c.top, s.size)
		}
		c.stale = false
	}
	return c.top
}

// get is the count of size (for invariant checks).
func (c *sizeCounts) get(size uint64) int {
	if len(c.slots) == 0 {
		return 0
	}
	mask := len(c.slots) - 1
	for i := c.home(size); c.slots[i].size != 0; i = (i + 1) & mask {
		if c.slots[i].size == size {
			return c.slots[i].count
		}
	}
	return 0
}

func (c *sizeCounts) grow() {
	old := c.slots
	size := max(2*len(old), 16)
	c.slots = make([]sizeSlot, size)
	c.shift = uint8(64 - bitsLen(size-1))
	mask := size - 1
	for _, s := range old {
		if s.size == 0 {
			continue
		}
		i := c.home(s.size)
		for c.slots[i].size != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = s
	}
}

func bitsLen(x int) int {
	n := 0
	for ; x > 0; x >>= 1 {
		n++
	}
	return n
}

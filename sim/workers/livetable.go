package workers

// liveTable maps a task's recorded addresses to the blocks it holds. It
// was a Go map, and its hashing and probing were a sixth of the time of a
// trial-model event (three lookups per allocation's life: the alloc's
// duplicate check and insert, the free's lookup and delete). This is open
// addressing with linear probing and a multiplicative hash, which spreads
// the aligned addresses of a trace (low bits zero) by their high product
// bits; a removal shifts the entries after it back, so no tombstones pile
// up in a table that sees millions of inserts and removals.
type liveTable struct {
	slots []liveSlot // a power of two long, or empty
	n     int
	shift uint // 64 - log2(len(slots))
}

type liveSlot struct {
	addr uint64
	full bool
	l    live
}

const minLiveSlots = 64

func (t *liveTable) home(addr uint64) int {
	return int((addr * 0x9e3779b97f4a7c15) >> t.shift)
}

// find returns addr's slot, or -1.
func (t *liveTable) find(addr uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.full {
			return -1
		}
		if s.addr == addr {
			return i
		}
	}
}

// at returns the entry in slot i (from find), to read or update.
func (t *liveTable) at(i int) *live { return &t.slots[i].l }

// insert adds addr, which the table does not hold.
func (t *liveTable) insert(addr uint64, l live) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(addr)
	for t.slots[i].full {
		i = (i + 1) & mask
	}
	t.slots[i] = liveSlot{addr: addr, full: true, l: l}
	t.n++
}

func (t *liveTable) grow() {
	old := t.slots
	n := max(minLiveSlots, 2*len(old))
	t.slots = make([]liveSlot, n)
	t.shift = 64
	for k := n; k > 1; k >>= 1 {
		t.shift--
	}
	t.n = 0
	for i := range old {
		if old[i].full {
			t.insert(old[i].addr, old[i].l)
		}
	}
}

// removeAt empties slot i and moves back the entries of its probe run that
// may live closer to their home slot.
func (t *liveTable) removeAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].full; j = (j + 1) & mask {
		// The entry at j is dist slots past its home; the hole is gap
		// slots before j. It may fill the hole if that is not before its
		// home.
		dist := (j - t.home(t.slots[j].addr)) & mask
		gap := (j - i) & mask
		if dist >= gap {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = liveSlot{}
	t.n--
}

func (t *liveTable) len() int { return t.n }

// reset empties the table, keeping its slots.
func (t *liveTable) reset() {
	if t.n > 0 {
		clear(t.slots)
		t.n = 0
	}
}

// appendAddrs appends every address the table holds to dst.
func (t *liveTable) appendAddrs(dst []uint64) []uint64 {
	for i := range t.slots {
		if t.slots[i].full {
			dst = append(dst, t.slots[i].addr)
		}
	}
	return dst
}

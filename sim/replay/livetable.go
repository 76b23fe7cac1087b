package replay

// liveTable maps a recorded address to its live block. It replaces a Go map
// on the replay's hottest path (issue 19): every alloc looked its address
// up twice (the duplicate check, then the insert) and every free twice (the
// lookup, then the delete or the update), and the map's hashing and probing
// were about a sixth of the replay. Here a lookup returns a slot, and the
// insert, update or delete that follows uses it without probing again, as
// long as nothing changed the table in between (ver says so; otherwise it
// probes afresh, so a stale slot is never trusted).
//
// Open addressing with linear probing, at most a quarter full up to
// liveDenseSlots slots and half full beyond (full); deletion shifts the
// rest of the run back (Knuth's algorithm R), so there are no tombstones
// and lookups stay short however long the trace. A slot holds its key and
// its block together (56 bytes): the lookup that finds the key has then
// fetched the block too, where keys and blocks in parallel slices (16 and
// 40 bytes a slot) take a second cache line per lookup. Merged slots
// alone measured slower in an earlier round (a miss walks wider slots);
// merged and a quarter full measured best of the four layouts
// (docs/performance.md, "Issue 19, next round").
type liveTable struct {
	slots []liveSlot
	n     int
	shift uint8
	ver   uint64 // bumped by every change to the slots
	limit int    // the most entries the slots hold without being full
}

type liveSlot struct {
	addr uint64
	full bool
	lb   liveBlock
}

// liveRef is a lookup's answer: the slot of the address, or where it
// would go, at version ver.
type liveRef struct {
	i     int
	ver   uint64
	found bool
}

const liveMinSlots = 64

// liveDenseSlots is the size up to which the table is kept at most a
// quarter full rather than half: an alloc looks up an address that is not
// there, and in a half-full table the first slot it probes is taken
// about half the time, which costs the probe loop (3% of a replay in
// BenchmarkReplay1M's profile); a quarter full, about a quarter. Below
// this size the memory is small (56 bytes a slot, 3.5 MiB at most);
// above it, a trace with millions of live blocks keeps the half-full
// table's memory.
const liveDenseSlots = 1 << 16

// full reports whether n entries overfill a table of size slots.
func full(n, size int) bool {
	if size <= liveDenseSlots {
		return 4*n > size
	}
	return 2*n > size
}

func (t *liveTable) home(addr uint64) int {
	// Blocks are 512 B aligned, so the low bits say nothing: Fibonacci
	// hashing takes the high bits of the product instead.
	return int((addr * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the address's slot or the empty slot where it would go.
func (t *liveTable) find(addr uint64) liveRef {
	if r, ok := t.first(addr); ok {
		return r
	}
	return t.probe(addr)
}

// first is find's first probe, which usually answers (ok); small enough
// to be inlined where the replay looks up every event's address, which
// then calls probe only when it did not answer (find, with its call to
// probe, is over the inlining budget).
func (t *liveTable) first(addr uint64) (liveRef, bool) {
	if i := t.home(addr); uint(i) < uint(len(t.slots)) {
		if s := &t.slots[i]; !s.full || s.addr == addr {
			return liveRef{i: i, ver: t.ver, found: s.full}, true
		}
	}
	return liveRef{}, false
}

// probe is find past the first slot (or in a table not yet made).
func (t *liveTable) probe(addr uint64) liveRef {
	if t.slots == nil {
		t.init(liveMinSlots)
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.full {
			return liveRef{i: i, ver: t.ver}
		}
		if s.addr == addr {
			return liveRef{i: i, ver: t.ver, found: true}
		}
	}
}

func (t *liveTable) init(size int) {
	t.slots = make([]liveSlot, size)
	t.limit = size / 4
	if size > liveDenseSlots {
		t.limit = size / 2
	}
	t.shift = uint8(64 - bitsOf(size))
	t.n = 0
	t.ver++
}

func bitsOf(size int) int {
	b := 0
	for 1<<b < size {
		b++
	}
	return b
}

// get returns the block live at addr.
func (t *liveTable) get(addr uint64) (liveBlock, bool) {
	r := t.find(addr)
	if !r.found {
		return liveBlock{}, false
	}
	return t.slots[r.i].lb, true
}

// at returns the block of a found ref.
func (t *liveTable) at(r liveRef) *liveBlock { return &t.slots[r.i].lb }

// put sets addr's block, using r when the table has not changed since it
// was found.
func (t *liveTable) put(r liveRef, addr uint64, lb liveBlock) {
	if r.ver != t.ver {
		r = t.find(addr)
	}
	s := &t.slots[r.i]
	s.lb = lb
	if r.found {
		return
	}
	s.addr, s.full = addr, true
	t.n++
	t.ver++
	if full(t.n, len(t.slots)) {
		t.grow()
	}
}

// slot returns addr's block to be filled in place, adding addr when it is
// new, using r when the table has not changed since it was found. A new
// address's block may hold an emptied slot's old fields (remove does not
// clear them): the caller sets every field. The
// replay's alloc sets the fields one by one there: a block built on the
// stack with narrow stores and handed to put is copied with wide loads,
// which wait for those stores (a store-forwarding stall that put paid on
// every alloc).
//
// The replay's alloc writes out slot's usual case (a new address, the
// table unchanged since r and with room to spare: n < limit): slot is
// over the inlining budget and its call was a third of its cost.
func (t *liveTable) slot(r liveRef, addr uint64) *liveBlock {
	if r.ver != t.ver {
		r = t.find(addr)
	}
	if r.found {
		return &t.slots[r.i].lb
	}
	if full(t.n+1, len(t.slots)) {
		// Grown first, where put grows just after: the same sizes.
		t.grow()
		r = t.find(addr)
	}
	s := &t.slots[r.i]
	s.addr, s.full = addr, true
	t.n++
	t.ver++
	return &s.lb
}

// reserve makes room for n blocks without growing.
func (t *liveTable) reserve(n int) {
	size := liveMinSlots
	for full(n, size) {
		size *= 2
	}
	if size > len(t.slots) {
		if t.slots == nil {
			t.init(size)
		} else {
			for len(t.slots) < size {
				t.grow()
			}
		}
	}
}

func (t *liveTable) set(addr uint64, lb liveBlock) { t.put(t.find(addr), addr, lb) }

func (t *liveTable) grow() {
	old := t.slots
	t.init(2 * len(old))
	mask := len(t.slots) - 1
	for k := range old {
		s := &old[k]
		if !s.full {
			continue
		}
		i := t.home(s.addr)
		for t.slots[i].full {
			i = (i + 1) & mask
		}
		t.slots[i] = *s
		t.n++
	}
}

// remove deletes addr's block, using r when the table has not changed
// since it was found.
func (t *liveTable) remove(r liveRef, addr uint64) {
	if r.ver != t.ver {
		r = t.find(addr)
	}
	if !r.found {
		return
	}
	mask := len(t.slots) - 1
	i := r.i
	// Move back each later entry of the run that may sit at or after the
	// hole's place, so that no lookup meets an empty slot before its key.
	for j := (i + 1) & mask; t.slots[j].full; j = (j + 1) & mask {
		h := t.home(t.slots[j].addr)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	// Emptied, not cleared: every way into a slot (slot, put, grow) sets
	// its key and all of its block, so only the block pointer is dropped
	// (for the collector); a whole clear cost a third of a remove.
	s := &t.slots[i]
	s.full = false
	s.lb.b = nil
	t.n--
	t.ver++
}

func (t *liveTable) del(addr uint64) { t.remove(t.find(addr), addr) }

func (t *liveTable) len() int { return t.n }

// each calls f for every live block, in no particular order; f must not
// change the table.
func (t *liveTable) each(f func(addr uint64, lb *liveBlock)) {
	for k := range t.slots {
		if s := &t.slots[k]; s.full {
			f(s.addr, &s.lb)
		}
	}
}

package workers

import (
	"slices"
	"sync"

	"github.com/memreplay/memreplay/allocator"
)

// liveTable maps a task's recorded addresses to the blocks it holds. It
// was a Go map, and its hashing and probing were a sixth of the time of a
// trial-model event (three lookups per allocation's life: the alloc's
// duplicate check and insert, the free's lookup and delete). This is open
// addressing with linear probing and a multiplicative hash, which spreads
// the aligned addresses of a trace (low bits zero) by their high product
// bits; a removal shifts the entries after it back, so no tombstones pile
// up in a table that sees millions of inserts and removals.
//
// A slot is an address and a block pointer, 16 bytes, four to a cache
// line: what a block was record_stream'd on, and whether its free waits
// for those streams, are kept aside (side), keyed by address, because
// few blocks of a trace ever have them. Slots that carried them inline
// (56 bytes, a slice among them) made each probe a cache miss of its
// own, each shift on removal a copy of three pointers (write barriers
// while the collector marks) and the table three times the garbage per
// run.
type liveTable struct {
	slots []liveSlot // a power of two long, or empty
	n     int
	shift uint // 64 - log2(len(slots))
	// Two addresses find answers without a probe: any above max, the
	// greatest inserted since the table was last empty, and gone, the
	// last one removed, while goneOK (it was not inserted again). A
	// probe that misses walks its whole run to an empty slot, the
	// longest walk there is, and most misses are one of these two: an
	// alloc's duplicate check under sim/trial (whose addresses only grow
	// within a trial) and a free_completed after its free_requested. They
	// were two of the four lookups of a block's life and, in the trial
	// model, more of the table's time than the two that hit.
	max    uint64
	gone   uint64
	goneOK bool
	// side holds the entries of blocks that were record_stream'd; an
	// entry leaves with its slot (removeAt, reset).
	side map[uint64]*streamed
}

// liveSlot is empty when b is nil: a held block is never nil.
type liveSlot struct {
	addr uint64
	b    *allocator.Block
}

// streamed is a block's record_stream'd streams, and whether its free was
// requested and waits for them.
type streamed struct {
	streams []allocator.Stream
	freed   bool
}

const minLiveSlots = 64

func (t *liveTable) home(addr uint64) int {
	return int((addr * 0x9e3779b97f4a7c15) >> t.shift)
}

// find returns addr's slot, or -1.
func (t *liveTable) find(addr uint64) int {
	if t.n == 0 || addr > t.max || addr == t.gone && t.goneOK {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.b == nil {
			return -1
		}
		if s.addr == addr {
			return i
		}
	}
}

// block returns the block in slot i (from find).
func (t *liveTable) block(i int) *allocator.Block { return t.slots[i].b }

// streamsOf returns the record_stream entry of the block in slot i, or nil
// when it has none.
func (t *liveTable) streamsOf(i int) *streamed {
	if len(t.side) == 0 {
		return nil
	}
	return t.side[t.slots[i].addr]
}

// addStream notes that the block in slot i was used on s.
func (t *liveTable) addStream(i int, s allocator.Stream) {
	addr := t.slots[i].addr
	e := t.side[addr]
	if e == nil {
		if t.side == nil {
			t.side = map[uint64]*streamed{}
		}
		e = &streamed{}
		t.side[addr] = e
	}
	if !slices.Contains(e.streams, s) {
		e.streams = append(e.streams, s)
	}
}

// insert adds addr, which the table does not hold, with b (not nil).
func (t *liveTable) insert(addr uint64, b *allocator.Block) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(addr)
	for t.slots[i].b != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = liveSlot{addr: addr, b: b}
	t.n++
	t.max = max(t.max, addr)
	if addr == t.gone {
		t.goneOK = false
	}
}

func (t *liveTable) grow() {
	old := t.slots
	n := max(minLiveSlots, 2*len(old))
	if len(old) == 0 {
		// A released table's slots, empty, if one is spare.
		if s := spareSlots.get(); len(s) >= n {
			t.slots, t.shift = s, shiftOf(len(s))
			return
		}
	}
	t.slots = make([]liveSlot, n)
	t.shift = shiftOf(n)
	t.n = 0
	for i := range old {
		if old[i].b != nil {
			t.insert(old[i].addr, old[i].b)
		}
	}
}

// shiftOf is 64 - log2(n), n a power of two.
func shiftOf(n int) uint {
	s := uint(64)
	for ; n > 1; n >>= 1 {
		s--
	}
	return s
}

// removeAt empties slot i, with its record_stream entry, and moves back
// the entries of its probe run that may live closer to their home slot.
func (t *liveTable) removeAt(i int) {
	addr := t.slots[i].addr
	if len(t.side) > 0 {
		delete(t.side, addr)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].b != nil; j = (j + 1) & mask {
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
	t.gone, t.goneOK = addr, true
	if t.n == 0 {
		t.max = 0
	}
}

func (t *liveTable) len() int { return t.n }

// reset empties the table, keeping its slots.
func (t *liveTable) reset() {
	if t.n > 0 {
		clear(t.slots)
		t.n = 0
	}
	t.max, t.goneOK = 0, false
	clear(t.side)
}

// release empties the table and hands its slots to the next run's
// workers: each worker of a run grew its table from nothing to its task's
// peak, an eighth of the bytes a trial-model run allocated.
func (t *liveTable) release() {
	t.reset()
	if len(t.slots) > 0 {
		spareSlots.put(t.slots)
	}
	t.slots, t.shift = nil, 0
}

// spareSlots is the released tables' slots: emptied, at most maxSpareTables
// of them, none above maxSpareSlots (a trace that held a million blocks
// once keeps no 16 MiB table alive).
var spareSlots slotPool

const (
	maxSpareTables = 64
	maxSpareSlots  = 1 << 16
)

type slotPool struct {
	mu   sync.Mutex
	free [][]liveSlot
}

func (p *slotPool) get() []liveSlot {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	s := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return s
}

// put keeps s, which must hold no entry.
func (p *slotPool) put(s []liveSlot) {
	if len(s) > maxSpareSlots {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxSpareTables {
		p.free = append(p.free, s)
	}
}

// appendAddrs appends every address the table holds to dst.
func (t *liveTable) appendAddrs(dst []uint64) []uint64 {
	for i := range t.slots {
		if t.slots[i].b != nil {
			dst = append(dst, t.slots[i].addr)
		}
	}
	return dst
}

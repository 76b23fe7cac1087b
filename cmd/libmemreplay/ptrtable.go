package main

import "github.com/memreplay/memreplay/allocator"

// ptrTable maps the pointers one device's allocator handed out to their
// blocks: memreplay_free and memreplay_record_stream receive only the raw
// pointer. There is one table per device, guarded by the device's lock
// (device.mu), which is also the lock of its allocator (built with
// allocator.WithoutLocking): a malloc puts its pointer, and a free takes
// it, in the same critical section as the allocator's own work, so the
// table costs no lock of its own. (It used to be one table for all
// devices, split into 64 shards each with its own mutex: two lock pairs a
// malloc+free pair, besides the allocator's two; docs/performance.md,
// "The C ABI pair, next round".) A free names the device PyTorch recorded
// at its malloc, which picks the table; the others are searched only when
// that one does not have the pointer (lib.go, release).
//
// The table is an open-addressing hash table (linear probing, deletion by
// backward shift) rather than a Go map: a pair costs one probe to insert
// and one to remove, where a map takes a lookup and an assignment, then a
// lookup and a delete, each hashing the key again. A slot holds the key
// beside its entry, so that a probe that finds its key reads one cache
// line, not one in a key array and one in a value array (a training step
// keeps thousands of blocks live, and the table then outgrows the cache).
type ptrTable struct {
	slots []ptrSlot
	count int
	shift uint32 // 64 - log2(len(slots))
}

type ptrSlot struct {
	key uintptr // pointer+1; 0: an empty slot
	ptrEntry
}

// ptrTableMin is a table's first size, in slots (a power of two).
const ptrTableMin = 64

type ptrEntry struct {
	b *allocator.Block
	// streamed: the block has a use on another stream (record_stream),
	// counted in the free queue's streamed (freequeue.go).
	streamed bool
}

func (t *ptrTable) init() { t.resize(ptrTableMin) }

// hash spreads an address: blocks are at least 512-byte aligned, so the
// low bits carry nothing, and large blocks are 2 MiB aligned, so only the
// product's high bits are used.
func hash(p uintptr) uint64 { return (uint64(p) >> 9) * 0x9E3779B97F4A7C15 }

// home is the slot p hashes to.
func (t *ptrTable) home(p uintptr) int { return int(hash(p) >> t.shift) }

// find returns p's slot, or the empty slot where p would go. The one
// address whose key would be 0 is never in the table (nor handed out: a
// block cannot start at the last byte).
func (t *ptrTable) find(p uintptr) (int, bool) {
	mask := len(t.slots) - 1
	k := p + 1
	if k == 0 {
		return -1, false
	}
	for i := t.home(p); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (t *ptrTable) resize(n int) {
	old := t.slots
	t.slots = make([]ptrSlot, n)
	t.shift = 64
	for m := n; m > 1; m >>= 1 {
		t.shift--
	}
	for _, s := range old {
		if s.key != 0 {
			j, _ := t.find(s.key - 1)
			t.slots[j] = s
		}
	}
}

// remove empties slot i, moving later entries of its probe run back so
// that no lookup stops early at the hole.
func (t *ptrTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].key - 1)
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = ptrSlot{}
	t.count--
}

// put adds p; false if p was already there (an allocator bug), in which
// case the entry is replaced.
func (t *ptrTable) put(p uintptr, e ptrEntry) bool {
	i, dup := t.find(p)
	if i < 0 {
		return true // not kept: no free can name it either
	}
	if !dup {
		if 4*(t.count+1) > 3*len(t.slots) {
			t.resize(2 * len(t.slots))
			i, _ = t.find(p)
		}
		t.slots[i].key = p + 1
		t.count++
	}
	t.slots[i].ptrEntry = e
	return !dup
}

// take removes p and returns its entry.
func (t *ptrTable) take(p uintptr) (ptrEntry, bool) {
	i, ok := t.find(p)
	var e ptrEntry
	if ok {
		e = t.slots[i].ptrEntry
		t.remove(i)
	}
	return e, ok
}

// get returns p's entry, to change in place; nil if p is not there.
func (t *ptrTable) get(p uintptr) *ptrEntry {
	if i, ok := t.find(p); ok {
		return &t.slots[i].ptrEntry
	}
	return nil
}

// len counts the live pointers.
func (t *ptrTable) len() int { return t.count }

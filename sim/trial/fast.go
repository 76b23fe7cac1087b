package trial

import "unsafe"

// The recipes name sites, parameters and joined names by strings: a
// layer's kind ("attention.q") and suffixes (".grad"). Looking them up in
// Go maps hashed and compared the strings' bytes several times per op, a
// tenth of a trial-model event's time. Every kind the recipes pass is a
// literal or a joined name from cat, whose bytes never move or change, so
// a string's address and length name its content: the fast tables below
// key on those, hashed as two words, in front of the maps. A string with
// the same content at another address only misses the fast table and is
// then found in the map, so an entry is never wrong, only absent.

// kindKey is a kind string by address, and its length and a layer packed
// in one word, so that a slot is 16 bytes: the sites' table of a BERT-base
// trial (1,400 sites) is 32 KiB rather than 96, and its probes, one or two
// per event, a cache miss less often. A key that does not pack (a length
// or layer out of 16 bits, an empty string) has p nil and is never kept:
// it goes to the maps every time.
type kindKey struct {
	p  *byte // the string's bytes: kept alive by the key
	nl uint32
}

func keyOf(layer int, kind string) kindKey {
	if len(kind) == 0 || len(kind) > 0xffff || layer < -1 || layer >= 0xffff {
		return kindKey{}
	}
	return kindKey{unsafe.StringData(kind), uint32(len(kind))<<16 | uint32(layer+1)}
}

func (k kindKey) hash() uint64 {
	return uint64(uintptr(unsafe.Pointer(k.p))) ^ uint64(k.nl)<<24
}

// pairKey is cat's two strings by address.
type pairKey struct {
	a, b   *byte
	na, nb int32
}

func pairOf(a, b string) pairKey {
	return pairKey{unsafe.StringData(a), unsafe.StringData(b), int32(len(a)), int32(len(b))}
}

func (k pairKey) hash() uint64 {
	return uint64(uintptr(unsafe.Pointer(k.a))) ^ uint64(uintptr(unsafe.Pointer(k.b)))<<17 ^ uint64(uint32(k.na))<<40 ^ uint64(uint32(k.nb))<<52
}

// kindTable and pairTable are open addressing with linear probing,
// never removing: they are emptied whole (reset), and also when full past
// maxFastEntries, which only strings made afresh for each call would
// reach. kindTable is filled up to three quarters (its probes stay within
// a cache line or two), pairTable to a half. Two concrete types rather than one generic one: a generic table
// calls its key's hash through a dictionary, not inlined, which cost as
// much as the map lookup it saves.
type kindTable struct {
	slots []kindSlot
	n     int
	shift uint
}

// kindSlot is empty when its key's p is nil.
type kindSlot struct {
	p  *byte
	nl uint32
	v  int32
}

type pairTable struct {
	slots []pairSlot
	n     int
	shift uint
}

type pairSlot struct {
	k    pairKey
	v    string
	full bool
}

const (
	maxFastEntries = 1 << 14
	minFastSlots   = 256
	fibonacci      = 0x9e3779b97f4a7c15
)

// shiftFor is 64 - log2(n), n a power of two.
func shiftFor(n int) uint {
	s := uint(64)
	for ; n > 1; n >>= 1 {
		s--
	}
	return s
}

// get finds k; a key that does not pack (p nil) matches no slot, as the
// probe stops at the first empty one, whose p is nil too. No test of p
// here: get stays small enough to inline.
func (t *kindTable) get(k kindKey) (int32, bool) {
	if t.n > 0 {
		mask := len(t.slots) - 1
		for i := int((k.hash() * fibonacci) >> t.shift); t.slots[i].p != nil; i = (i + 1) & mask {
			if t.slots[i].p == k.p && t.slots[i].nl == k.nl {
				return t.slots[i].v, true
			}
		}
	}
	return 0, false
}

// put adds k, which the table does not hold; a key that does not pack is
// not kept.
func (t *kindTable) put(k kindKey, v int32) {
	if k.p == nil {
		return
	}
	if t.n >= maxFastEntries {
		t.reset()
	}
	if (t.n+1)*4 > len(t.slots)*3 {
		old := t.slots
		t.slots = make([]kindSlot, max(minFastSlots, 2*len(old)))
		t.shift, t.n = shiftFor(len(t.slots)), 0
		for i := range old {
			if old[i].p != nil {
				t.put(kindKey{old[i].p, old[i].nl}, old[i].v)
			}
		}
	}
	mask := len(t.slots) - 1
	i := int((k.hash() * fibonacci) >> t.shift)
	for t.slots[i].p != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = kindSlot{p: k.p, nl: k.nl, v: v}
	t.n++
}

func (t *kindTable) reset() {
	if t.n > 0 {
		clear(t.slots)
		t.n = 0
	}
}

func (t *pairTable) get(k pairKey) (string, bool) {
	if t.n > 0 {
		mask := len(t.slots) - 1
		for i := int((k.hash() * fibonacci) >> t.shift); t.slots[i].full; i = (i + 1) & mask {
			if t.slots[i].k == k {
				return t.slots[i].v, true
			}
		}
	}
	return "", false
}

// put adds k, which the table does not hold.
func (t *pairTable) put(k pairKey, v string) {
	if t.n >= maxFastEntries {
		t.reset()
	}
	if (t.n+1)*2 > len(t.slots) {
		old := t.slots
		t.slots = make([]pairSlot, max(minFastSlots, 2*len(old)))
		t.shift, t.n = shiftFor(len(t.slots)), 0
		for i := range old {
			if old[i].full {
				t.put(old[i].k, old[i].v)
			}
		}
	}
	mask := len(t.slots) - 1
	i := int((k.hash() * fibonacci) >> t.shift)
	for t.slots[i].full {
		i = (i + 1) & mask
	}
	t.slots[i] = pairSlot{k: k, v: v, full: true}
	t.n++
}

func (t *pairTable) reset() {
	if t.n > 0 {
		clear(t.slots)
		t.n = 0
	}
}

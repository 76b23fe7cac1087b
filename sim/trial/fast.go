package trial

import (
	"math"
	"unsafe"
)

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
// in one word. A key that does not pack (a length out of 16 bits, a layer
// outside [-1, maxRowWidth-1), an empty string) has p nil and is never
// kept: it goes to the maps every time.
type kindKey struct {
	p  *byte // the string's bytes: kept alive by the key
	nl uint32
}

func keyOf(layer int, kind string) kindKey {
	if len(kind) == 0 || len(kind) > 0xffff || layer < -1 || layer+1 >= maxRowWidth {
		return kindKey{}
	}
	return kindKey{unsafe.StringData(kind), uint32(len(kind))<<16 | uint32(layer+1)}
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

// pairTable is open addressing with linear probing, never removing: it
// is emptied whole (reset), and also when full past maxFastEntries, which
// only strings made afresh for each call would reach. Two concrete tables
// rather than one generic one: a generic table calls its key's hash
// through a dictionary, not inlined, which cost as much as the map lookup
// it saves.
//
// kindTable is two levels: a kind's string (address and length) to its
// row, by the same open addressing, and the row, indexed by layer+1, to the
// value. A model has a hundred-odd kinds and a few dozen layers, so the
// kinds' table and the rows are a few KiB that stay in the first-level
// cache, where a table of every (kind, layer) pair (1,400 sites of a
// BERT-base trial, 32 KiB and more) missed it on most of the one or two
// lookups an event makes.
type kindTable struct {
	kinds []kindSlot // a power of two long, or empty
	nk    int        // kinds held: rows 0..nk-1
	shift uint
	rows  []int32 // row r is rows[r*w : (r+1)*w]; value+1, 0 where none
	w     int     // the rows' width: a power of two above every layer+1 held
	n     int     // values held
}

// kindSlot is empty when p is nil.
type kindSlot struct {
	p   *byte
	n   uint32
	row int32
}

// maxRowWidth bounds the layers kept (a model of thousands of layers looks
// the rest up in the maps); maxRowCells bounds the rows' memory.
const (
	maxRowWidth = 1 << 12
	maxRowCells = 1 << 20
	minRowWidth = 16
)

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

func kindHash(p *byte, n uint32) uint64 {
	return uint64(uintptr(unsafe.Pointer(p))) ^ uint64(n)<<24
}

// get finds k; a key that does not pack (p nil) matches no slot, as the
// probe stops at the first empty one, whose p is nil too.
func (t *kindTable) get(k kindKey) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := len(t.kinds) - 1
	n := k.nl >> 16
	for i := int((kindHash(k.p, n) * fibonacci) >> t.shift); t.kinds[i].p != nil; i = (i + 1) & mask {
		if t.kinds[i].p == k.p && t.kinds[i].n == n {
			if l := int(k.nl & 0xffff); l < t.w {
				v := t.rows[int(t.kinds[i].row)*t.w+l]
				return v - 1, v != 0
			}
			return 0, false
		}
	}
	return 0, false
}

// put adds k, which the table does not hold; a key that does not pack, or
// a value of MaxInt32, is not kept.
func (t *kindTable) put(k kindKey, v int32) {
	if k.p == nil || v == math.MaxInt32 {
		return
	}
	l := int(k.nl & 0xffff)
	w := max(t.w, minRowWidth)
	for w <= l {
		w *= 2
	}
	if t.n >= maxFastEntries || (t.nk+1)*w > maxRowCells {
		t.reset()
	}
	if w != t.w {
		t.widen(w)
	}
	row := t.rowOf(k.p, k.nl>>16)
	t.rows[row*t.w+l] = v + 1
	t.n++
}

// rowOf returns the row of kind (p, n), made if new.
func (t *kindTable) rowOf(p *byte, n uint32) int {
	if len(t.kinds) > 0 {
		mask := len(t.kinds) - 1
		for i := int((kindHash(p, n) * fibonacci) >> t.shift); t.kinds[i].p != nil; i = (i + 1) & mask {
			if t.kinds[i].p == p && t.kinds[i].n == n {
				return int(t.kinds[i].row)
			}
		}
	}
	if (t.nk+1)*2 > len(t.kinds) {
		old := t.kinds
		t.kinds = make([]kindSlot, max(minFastSlots, 2*len(old)))
		t.shift = shiftFor(len(t.kinds))
		for _, s := range old {
			if s.p != nil {
				t.place(s)
			}
		}
	}
	row := t.nk
	t.place(kindSlot{p: p, n: n, row: int32(row)})
	t.nk++
	t.rows = append(t.rows, make([]int32, t.w)...)
	return row
}

// place puts a kind's slot into the kinds' table, which has room.
func (t *kindTable) place(s kindSlot) {
	mask := len(t.kinds) - 1
	i := int((kindHash(s.p, s.n) * fibonacci) >> t.shift)
	for t.kinds[i].p != nil {
		i = (i + 1) & mask
	}
	t.kinds[i] = s
}

// widen makes the rows w wide, keeping their values.
func (t *kindTable) widen(w int) {
	rows := make([]int32, t.nk*w, max(t.nk, minFastSlots/4)*w)
	for r := range t.nk {
		copy(rows[r*w:], t.rows[r*t.w:(r+1)*t.w])
	}
	t.rows, t.w = rows, w
}

func (t *kindTable) reset() {
	if t.nk > 0 {
		clear(t.kinds)
		t.rows = t.rows[:0]
		t.nk, t.n = 0, 0
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

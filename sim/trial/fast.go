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

// kindKey is a kind string by address, and a layer.
type kindKey struct {
	p     *byte // the string's bytes: kept alive by the key
	n     int32
	layer int32
}

func keyOf(layer int, kind string) kindKey {
	return kindKey{unsafe.StringData(kind), int32(len(kind)), int32(layer)}
}

func (k kindKey) hash() uint64 {
	return uint64(uintptr(unsafe.Pointer(k.p))) ^ uint64(uint32(k.layer))<<40 ^ uint64(uint32(k.n))<<20
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

type fastKey interface {
	comparable
	hash() uint64
}

// fastTable is open addressing with linear probing, never removing: it is
// emptied whole (reset), and also when full past maxFastEntries, which only
// strings made afresh for each call would reach.
type fastTable[K fastKey, V any] struct {
	slots []fastSlot[K, V]
	n     int
	shift uint
}

type fastSlot[K fastKey, V any] struct {
	k    K
	v    V
	full bool
}

const maxFastEntries = 1 << 14

func (t *fastTable[K, V]) home(k K) int {
	return int((k.hash() * 0x9e3779b97f4a7c15) >> t.shift)
}

func (t *fastTable[K, V]) get(k K) (V, bool) {
	if t.n > 0 {
		mask := len(t.slots) - 1
		for i := t.home(k); t.slots[i].full; i = (i + 1) & mask {
			if t.slots[i].k == k {
				return t.slots[i].v, true
			}
		}
	}
	var zero V
	return zero, false
}

// put adds k, which the table does not hold.
func (t *fastTable[K, V]) put(k K, v V) {
	if t.n >= maxFastEntries {
		t.reset()
	}
	if (t.n+1)*2 > len(t.slots) {
		old := t.slots
		t.slots = make([]fastSlot[K, V], max(256, 2*len(old)))
		t.shift = 64
		for n := len(t.slots); n > 1; n >>= 1 {
			t.shift--
		}
		t.n = 0
		for i := range old {
			if old[i].full {
				t.put(old[i].k, old[i].v)
			}
		}
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for t.slots[i].full {
		i = (i + 1) & mask
	}
	t.slots[i] = fastSlot[K, V]{k: k, v: v, full: true}
	t.n++
}

func (t *fastTable[K, V]) reset() {
	if t.n > 0 {
		clear(t.slots)
		t.n = 0
	}
}

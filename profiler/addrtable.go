package profiler

import (
	"math/bits"

	"github.com/memreplay/memreplay/trace"
)

// addrTable maps a live block's address to its site. It is a linear-probing
// hash table whose deletes leave the key in place, marked dead, so that a
// steady stream of inserts and deletes never rehashes or allocates: a Go
// map costs several times more per operation and allocates as it churns.
//
// Why dead keys stay: a caching allocator hands the same addresses out
// again and again, so the next put of an address usually finds its dead
// key and revives it in place, and a delete is one probe and a store
// (the backward shift of the earlier version moved the rest of the probe
// run on every delete, the profiler's costliest step per freed block,
// issue 19). Addresses that are not handed out again fill the table with
// dead keys; when the keys, live and dead, reach half the slots, the
// table is rebuilt from its live keys, at twice the size only when those
// fill more than a quarter of it, so that a rebuild is paid for by as
// many new addresses as it keeps.
//
// Key 0 marks an empty slot; address 0 itself, which no device hands out,
// is kept apart. vals holds a live key's site + 1 and 0 for a dead key.
type addrTable struct {
	keys  []uint64
	vals  []uint64
	n     int   // live keys
	used  int   // keys, live and dead
	shift uint8 // 64 - log2(len(keys))

	zero    bool
	zeroVal trace.StackID
}

const addrTableMinBits = 10

func (t *addrTable) init(logSize uint) {
	t.keys = make([]uint64, 1<<logSize)
	t.vals = make([]uint64, 1<<logSize)
	t.shift = uint8(64 - logSize)
	t.n, t.used = 0, 0
}

// slot is Fibonacci hashing: block addresses are multiples of 512, whose
// low bits carry nothing, and the multiply mixes the high ones down.
func (t *addrTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

func (t *addrTable) put(k uint64, v trace.StackID) {
	if k == 0 {
		t.zero, t.zeroVal = true, v
		return
	}
	if t.keys == nil {
		t.init(addrTableMinBits)
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			if t.vals[i] == 0 {
				t.n++
			}
			t.vals[i] = uint64(v) + 1
			return
		case 0:
			// A new key. Keep the load at 1/2 or below: probes stay
			// short, and the search for an absent key ends.
			if 2*(t.used+1) > len(t.keys) {
				t.rebuild()
				t.put(k, v)
				return
			}
			t.keys[i], t.vals[i] = k, uint64(v)+1
			t.n++
			t.used++
			return
		}
	}
}

func (t *addrTable) get(k uint64) (trace.StackID, bool) {
	if k == 0 {
		return t.zeroVal, t.zero
	}
	if t.keys == nil {
		return 0, false
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case 0:
			return 0, false
		case k:
			v := t.vals[i]
			if v == 0 {
				return 0, false
			}
			return trace.StackID(v - 1), true
		}
	}
}

func (t *addrTable) del(k uint64) {
	if k == 0 {
		t.zero, t.zeroVal = false, 0
		return
	}
	if t.keys == nil {
		return
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case 0:
			return
		case k:
			if t.vals[i] != 0 {
				t.vals[i] = 0
				t.n--
			}
			return
		}
	}
}

// rebuild drops the dead keys, doubling the table when the live ones fill
// more than a quarter of it.
func (t *addrTable) rebuild() {
	oldK, oldV := t.keys, t.vals
	logSize := uint(bits.Len(uint(len(oldK)))) - 1
	if 4*(t.n+1) > len(oldK) {
		logSize++
	}
	t.init(logSize)
	mask := uint64(len(t.keys) - 1)
	for j, k := range oldK {
		if k == 0 || oldV[j] == 0 {
			continue
		}
		i := t.slot(k)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.vals[i] = k, oldV[j]
		t.n++
		t.used++
	}
}

func (t *addrTable) len() int {
	if t.zero {
		return t.n + 1
	}
	return t.n
}

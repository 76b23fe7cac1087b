package profiler

import (
	"math/bits"

	"github.com/memreplay/memreplay/trace"
)

// addrTable maps a live block's address to its site. It is a linear-probing
// hash table with backward-shift deletion (no tombstones), so that a steady
// stream of inserts and deletes never rehashes or allocates: a Go map costs
// several times more per operation and allocates as it churns. Key 0 marks
// an empty slot; address 0 itself, which no device hands out, is kept apart.
type addrTable struct {
	keys  []uint64
	vals  []trace.StackID
	n     int
	shift uint8 // 64 - log2(len(keys))

	zero    bool
	zeroVal trace.StackID
}

const addrTableMinBits = 10

func (t *addrTable) init(logSize uint) {
	t.keys = make([]uint64, 1<<logSize)
	t.vals = make([]trace.StackID, 1<<logSize)
	t.shift = uint8(64 - logSize)
	t.n = 0
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
	// Grow at a load of 1/2: probes stay short.
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case 0:
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		case k:
			t.vals[i] = v
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
			return t.vals[i], true
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
	i := t.slot(k)
	for ; ; i = (i + 1) & mask {
		if t.keys[i] == 0 {
			return
		}
		if t.keys[i] == k {
			break
		}
	}
	t.n--
	// Backward shift: move later entries of the probe run into the hole
	// when their home slot does not lie cyclically in (hole, j].
	hole := i
	for j := (i + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		home := t.slot(t.keys[j])
		if (j-home)&mask >= (j-hole)&mask {
			t.keys[hole], t.vals[hole] = t.keys[j], t.vals[j]
			hole = j
		}
	}
	t.keys[hole], t.vals[hole] = 0, 0
}

func (t *addrTable) grow() {
	oldK, oldV := t.keys, t.vals
	t.init(uint(bits.Len(uint(len(oldK)))))
	for i, k := range oldK {
		if k != 0 {
			t.put(k, oldV[i])
		}
	}
}

func (t *addrTable) len() int {
	if t.zero {
		return t.n + 1
	}
	return t.n
}

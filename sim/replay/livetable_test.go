package replay

import (
	"math/rand/v2"
	"testing"
)

// TestLiveTableMatchesMap drives the live table and a Go map with the same
// random inserts, updates, deletes (through fresh and stale refs) and
// lookups over a small address range, so that runs collide, wrap around
// the end of the slots and grow the table; any lost, duplicated or
// unreachable entry shows as a difference. The small ranges keep the table
// at 128 and 256 slots, where runs often cross its end.
func TestLiveTableMatchesMap(t *testing.T) {
	for _, maxSpan := range []int{30, 60, 4000} {
		testLiveTable(t, maxSpan)
	}
}

func testLiveTable(t *testing.T, maxSpan int) {
	r := rand.New(rand.NewPCG(1, uint64(maxSpan)))
	var tab liveTable
	ref := map[uint64]liveBlock{}
	var base uint64
	for step := 0; step < 200000; step++ {
		// Addresses 512 B apart, as the replay's are; the range grows
		// then shrinks so that the table both grows and empties.
		span := 1 + step%maxSpan
		if step%2000 == 0 {
			// A fresh window of addresses, so that over the run they
			// land on every slot, the last ones included; the old
			// ones are deleted, which keeps the table small.
			for a := range ref {
				tab.del(a)
				delete(ref, a)
			}
			base = uint64(r.IntN(1 << 30))
		}
		addr := (base + uint64(r.IntN(span))) * 512
		if step%5000 == 2500 {
			// Room made ahead, as restoring a snapshot's live blocks
			// does, with entries already in the table.
			tab.reserve(tab.len() + r.IntN(3*maxSpan))
		}
		switch op := r.IntN(6); op {
		case 0, 1:
			lb := liveBlock{at: int64(step)}
			tab.set(addr, lb)
			ref[addr] = lb
		case 2:
			tab.del(addr)
			delete(ref, addr)
		case 3:
			// A ref made stale by a change in between.
			f := tab.find(addr)
			other := (base + uint64(r.IntN(span))) * 512
			if r.IntN(2) == 0 {
				tab.del(other)
				delete(ref, other)
			} else {
				tab.set(other, liveBlock{at: -int64(step)})
				ref[other] = liveBlock{at: -int64(step)}
			}
			if r.IntN(2) == 0 {
				tab.remove(f, addr)
				delete(ref, addr)
			} else if r.IntN(2) == 0 {
				tab.put(f, addr, liveBlock{at: int64(step)})
				ref[addr] = liveBlock{at: int64(step)}
			} else {
				// Filled in place, as the replay's alloc does:
				// every field (a new address's slot may hold
				// an earlier block's).
				*tab.slot(f, addr) = liveBlock{at: int64(step)}
				ref[addr] = liveBlock{at: int64(step)}
			}
		default:
			got, ok := tab.get(addr)
			want, wok := ref[addr]
			if ok != wok || got != want {
				t.Fatalf("span %d, step %d: get(%#x) = %v %v, want %v %v", maxSpan, step, addr, got, ok, want, wok)
			}
		}
		if tab.len() != len(ref) {
			t.Fatalf("step %d: %d entries, want %d", step, tab.len(), len(ref))
		}
		checkLimit(t, &tab)
	}
	seen := 0
	tab.each(func(addr uint64, lb *liveBlock) {
		seen++
		if want, ok := ref[addr]; !ok || *lb != want {
			t.Fatalf("each: %#x = %v, want %v %v", addr, *lb, want, ok)
		}
	})
	if seen != len(ref) {
		t.Fatalf("each saw %d entries, want %d", seen, len(ref))
	}
}

// TestLiveTableLarge fills the table past liveDenseSlots, where it grows
// at half full instead of a quarter, then empties it, against a Go map,
// with lookups of present and absent addresses all along.
func TestLiveTableLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var tab liveTable
	ref := map[uint64]liveBlock{}
	addrs := r.Perm(1 << 20)[:60000]
	check := func(step int) {
		a := uint64(addrs[r.IntN(len(addrs))]) * 512
		got, ok := tab.get(a)
		want, wok := ref[a]
		if ok != wok || got != want {
			t.Fatalf("step %d: get(%#x) = %v %v, want %v %v", step, a, got, ok, want, wok)
		}
	}
	for i, a := range addrs {
		lb := liveBlock{at: int64(i)}
		tab.set(uint64(a)*512, lb)
		ref[uint64(a)*512] = lb
		check(i)
		checkLimit(t, &tab)
	}
	if len(tab.slots) <= liveDenseSlots || 2*tab.len() > len(tab.slots) || 4*tab.len() < len(tab.slots) {
		t.Fatalf("%d entries in %d slots: not the half-full regime", tab.len(), len(tab.slots))
	}
	for i, a := range addrs {
		tab.del(uint64(a) * 512)
		delete(ref, uint64(a)*512)
		check(i)
		if tab.len() != len(ref) {
			t.Fatalf("step %d: %d entries, want %d", i, tab.len(), len(ref))
		}
		checkLimit(t, &tab)
	}
}

// checkLimit: the replay's alloc adds an address without slot's call
// while n < limit, which must be exactly when one more entry leaves the
// table not full (slot would not grow it), at every size, both regimes.
func checkLimit(t *testing.T, tab *liveTable) {
	t.Helper()
	if tab.slots == nil {
		return
	}
	if room := tab.n < tab.limit; room != !full(tab.n+1, len(tab.slots)) {
		t.Fatalf("%d entries in %d slots: limit %d says room %v", tab.n, len(tab.slots), tab.limit, room)
	}
}

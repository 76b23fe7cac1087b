package allocator

import (
	"math/rand/v2"
	"testing"
)

// The size index against a map, through random inserts, lookups and
// deletions that grow it, empty it and refill it: every probe run must
// survive the backward shifts of deletion (sizes are multiples of 512 with
// many collisions in a small table).
func TestSizeIndexAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var x sizeIndex
	ref := map[uint64]*sizeNode{}
	for step := 0; step < 200_000; step++ {
		size := uint64(rng.IntN(3000)+1) * 512
		switch n := ref[size]; {
		case n == nil && rng.IntN(3) > 0:
			n = &sizeNode{size: size}
			x.put(n)
			ref[size] = n
		case n != nil && rng.IntN(2) == 0:
			x.del(size)
			delete(ref, size)
		}
		if got := x.get(size); got != ref[size] {
			t.Fatalf("step %d: get(%d) = %p, want %p", step, size, got, ref[size])
		}
		if x.len() != len(ref) {
			t.Fatalf("step %d: %d nodes, want %d", step, x.len(), len(ref))
		}
		if step%10_000 == 0 {
			for s, n := range ref {
				if x.get(s) != n {
					t.Fatalf("step %d: size %d lost", step, s)
				}
			}
		}
	}
	for s := range ref {
		x.del(s)
	}
	if x.len() != 0 || x.get(512) != nil {
		t.Fatalf("%d nodes left after deleting all", x.len())
	}
}

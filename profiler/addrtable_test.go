package profiler

import (
	"math/rand/v2"
	"testing"

	"github.com/memreplay/memreplay/trace"
)

// TestAddrTable checks the table against a map through inserts, updates and
// deletes that wrap around the slot array and grow it.
func TestAddrTable(t *testing.T) {
	var tab addrTable
	ref := map[uint64]trace.StackID{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		// Few distinct addresses, multiples of 512 as on a device, and 0.
		k := uint64(rng.IntN(5000)) * 512
		switch rng.IntN(3) {
		case 0, 1:
			v := trace.StackID(rng.Uint32())
			tab.put(k, v)
			ref[k] = v
		default:
			tab.del(k)
			delete(ref, k)
		}
		if i%1000 == 0 {
			if tab.len() != len(ref) {
				t.Fatalf("step %d: len %d, want %d", i, tab.len(), len(ref))
			}
			for k, v := range ref {
				if got, ok := tab.get(k); !ok || got != v {
					t.Fatalf("step %d: get(%#x) = %d, %v; want %d", i, k, got, ok, v)
				}
			}
		}
	}
	for k := uint64(0); k < 5000*512; k += 512 {
		v, ok := tab.get(k)
		rv, rok := ref[k]
		if ok != rok || v != rv {
			t.Fatalf("get(%#x) = %d, %v; want %d, %v", k, v, ok, rv, rok)
		}
	}
}

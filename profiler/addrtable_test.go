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

// TestAddrTableFreshAddresses churns addresses that are never handed out
// again, as a trace whose blocks keep moving does: the dead keys must be
// dropped (the table stays a few times the live count, never the count of
// addresses seen) and the live ones kept through every rebuild.
func TestAddrTableFreshAddresses(t *testing.T) {
	var tab addrTable
	ref := map[uint64]trace.StackID{}
	var live []uint64
	rng := rand.New(rand.NewPCG(3, 4))
	next := uint64(512)
	for i := 0; i < 300000; i++ {
		// Between 100 and 600 live blocks, each at a new address.
		if len(live) < 100 || (len(live) < 600 && rng.IntN(2) == 0) {
			k := next
			next += 512 * uint64(1+rng.IntN(8))
			v := trace.StackID(rng.Uint32())
			tab.put(k, v)
			ref[k] = v
			live = append(live, k)
		} else {
			j := rng.IntN(len(live))
			k := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			tab.del(k)
			delete(ref, k)
			if _, ok := tab.get(k); ok {
				t.Fatalf("step %d: %#x still found after its delete", i, k)
			}
		}
		if tab.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", i, tab.len(), len(ref))
		}
		if i%5000 == 0 {
			for k, v := range ref {
				if got, ok := tab.get(k); !ok || got != v {
					t.Fatalf("step %d: get(%#x) = %d, %v; want %d", i, k, got, ok, v)
				}
			}
		}
	}
	if len(tab.keys) > 4096 {
		t.Fatalf("%d slots for at most 600 live keys: dead keys are kept", len(tab.keys))
	}
}

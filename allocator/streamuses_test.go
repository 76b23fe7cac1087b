package allocator_test

import (
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// TestStreamUsesOnlyWhileAllocated: a block's active test (block.go) reads
// only its first cache line, allocated and its event count, and not its
// uses of other streams, on the rule that RecordStream keeps uses only on
// an allocated block and its free turns them into events. The invariant
// checks hold that rule: a block freed with its uses kept fails them, and
// a block whose free turned them into events, held back until the other
// stream's work is done, passes and stays out of every merge.
func TestStreamUsesOnlyWhileAllocated(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "")
	x, err := a.Malloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Malloc(1<<20, 0) // x's neighbour, split from the same segment
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordStream(x, 7); err != nil {
		t.Fatal(err)
	}
	if err := allocator.CheckInvariants(a); err != nil {
		t.Fatalf("an allocated block with a use of stream 7: %v", err)
	}
	// Freed with its use turned into an event: pending, not merged with
	// y's free, and the checks pass.
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(y); err != nil {
		t.Fatal(err)
	}
	if err := allocator.CheckInvariants(a); err != nil {
		t.Fatalf("a block pending on stream 7's event: %v", err)
	}
	if st := a.Stats(); st.Active[allocator.StatAll].Current != 1 {
		t.Fatalf("active blocks %d, want 1 (x, pending)", st.Active[allocator.StatAll].Current)
	}
	z, err := a.Malloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordStream(z, 3); err != nil {
		t.Fatal(err)
	}
	allocator.MarkFreedKeepingUses(z)
	err = allocator.CheckInvariants(a)
	if err == nil || !strings.Contains(err.Error(), "uses of other streams") {
		t.Fatalf("a block freed with its use of stream 3 kept: checks say %v, want the kept uses named", err)
	}
}

package allocator_test

import (
	"slices"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// An observer of some actions sees exactly the entries of those actions,
// in order, beside an observer of all; removing one leaves the other's
// stream whole, and a removed observer is not called again.
func TestObserverForActions(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "")
	var all, decisions, frees []allocator.Action
	stopAll := a.AddObserver(func(e allocator.TraceEntry) { all = append(all, e.Action) })
	stopDec := a.AddObserverFor(allocator.Decisions, func(e allocator.TraceEntry) { decisions = append(decisions, e.Action) })
	stopFree := a.AddObserverFor(allocator.Actions(allocator.ActionFreeCompleted), func(e allocator.TraceEntry) {
		frees = append(frees, e.Action)
	})
	run := func() {
		b, err := a.Malloc(4<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
		if err := a.EmptyCache(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	want := []allocator.Action{allocator.ActionSegmentAlloc, allocator.ActionAlloc, allocator.ActionFreeRequested,
		allocator.ActionFreeCompleted, allocator.ActionSegmentFree}
	if !slices.Equal(all, want) {
		t.Fatalf("all actions: %v, want %v", all, want)
	}
	if want := []allocator.Action{allocator.ActionSegmentAlloc, allocator.ActionSegmentFree}; !slices.Equal(decisions, want) {
		t.Fatalf("decisions: %v, want %v", decisions, want)
	}
	if want := []allocator.Action{allocator.ActionFreeCompleted}; !slices.Equal(frees, want) {
		t.Fatalf("free_completed: %v, want %v", frees, want)
	}
	stopAll()
	stopFree()
	all, decisions, frees = nil, nil, nil
	run()
	if all != nil || frees != nil {
		t.Fatalf("removed observers called: %v, %v", all, frees)
	}
	if len(decisions) != 2 {
		t.Fatalf("decisions after removing the others: %v", decisions)
	}
	stopDec()
	run()
	if len(decisions) != 2 {
		t.Fatalf("removed decision observer called: %v", decisions)
	}
}

// The caller's requests PyTorch's trace has no entry for (record_stream,
// empty_cache) reach the observers that ask for them, under the lock and in
// their place: record_stream when called on a live block (its own stream
// too), empty_cache after the segment frees it caused. An observer of
// AllActions does not see them.
func TestRequestsReachTheirObservers(t *testing.T) {
	_, _, a, _ := simAllocator(t, gpu.Options{Capacity: 1 << 30, NoContextOverhead: true}, "")
	var all, withRequests []allocator.TraceEntry
	a.AddObserver(func(e allocator.TraceEntry) { all = append(all, e) })
	a.AddObserverFor(allocator.AllActions|allocator.Requests, func(e allocator.TraceEntry) { withRequests = append(withRequests, e) })
	b, err := a.Malloc(4<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	if err := a.RecordStream(b, 7); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordStream(b, 0); err != nil { // its own stream: a no-op, still the caller's call
		t.Fatal(err)
	}
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordStream(b, 7); err == nil { // freed: refused, not recorded
		t.Fatal("record_stream of a freed block accepted")
	}
	if err := a.ProcessEvents(); err != nil {
		t.Fatal(err)
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	var acts []allocator.Action
	for _, e := range withRequests {
		acts = append(acts, e.Action)
	}
	want := []allocator.Action{allocator.ActionSegmentAlloc, allocator.ActionAlloc,
		allocator.ActionRecordStream, allocator.ActionRecordStream, allocator.ActionFreeRequested, allocator.ActionFreeCompleted,
		allocator.ActionSegmentFree, allocator.ActionEmptyCache}
	if !slices.Equal(acts, want) {
		t.Fatalf("with requests: %v, want %v", acts, want)
	}
	if e := withRequests[2]; e.Addr != addr || e.Stream != 7 {
		t.Fatalf("record_stream entry %+v, want addr %#x stream 7", e, addr)
	}
	for _, e := range all {
		if allocator.Requests.Has(e.Action) {
			t.Fatalf("an observer of AllActions saw %v", e.Action)
		}
	}
}

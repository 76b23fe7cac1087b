package allocator_test

import (
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

func policyAllocator(t *testing.T, name, conf string, capacity uint64) (*gpu.Process, *allocator.Allocator) {
	t.Helper()
	pol, err := allocator.NewPolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	_, proc, a, _ := simAllocator(t, gpu.Options{Capacity: capacity, NoContextOverhead: true}, conf,
		allocator.WithPolicy(pol), allocator.WithInvariantChecks())
	return proc, a
}

func mustMalloc(t *testing.T, a *allocator.Allocator, size uint64) *allocator.Block {
	t.Helper()
	b, err := a.Malloc(size, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustFree(t *testing.T, a *allocator.Allocator, b *allocator.Block) {
	t.Helper()
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
}

func TestNewPolicy(t *testing.T) {
	for _, n := range allocator.PolicyNames() {
		p, err := allocator.NewPolicy(n)
		if err != nil || p.Name() != n {
			t.Fatalf("NewPolicy(%q) = %v, %v", n, p, err)
		}
	}
	if p, err := allocator.NewPolicy(""); err != nil || p.Name() != "pytorch" {
		t.Fatalf(`NewPolicy("") = %v, %v; want pytorch`, p, err)
	}
	for _, n := range []string{"gmlake", "PyTorch"} {
		if _, err := allocator.NewPolicy(n); err == nil {
			t.Fatalf("NewPolicy(%q) accepted", n)
		}
	}
}

// TestStitchReusesFreePages: two free holes of 10 MiB between live blocks
// serve a 20 MiB request under stitch without a byte more from the device;
// PyTorch's expandable segments map new pages for it. Freeing the stitched
// block gives the holes back.
func TestStitchReusesFreePages(t *testing.T) {
	for _, c := range []struct {
		policy  string
		stitch  bool
		growing bool
	}{{"pytorch", false, true}, {"stitch", true, false}} {
		t.Run(c.policy, func(t *testing.T) {
			proc, a := policyAllocator(t, c.policy, "expandable_segments:True", 1<<30)
			var bs []*allocator.Block
			for i := 0; i < 5; i++ {
				bs = append(bs, mustMalloc(t, a, 10*mib))
			}
			// The pages up to the end of the last block are mapped; leave
			// no free tail so that growing means new pages.
			mustMalloc(t, a, uint64(a.Stats().ReservedBytes[allocator.StatAll].Current)-50*mib)
			holes := []uint64{bs[1].Addr(), bs[3].Addr()}
			mustFree(t, a, bs[1])
			mustFree(t, a, bs[3])
			before := a.Stats()
			maps := proc.Counters().Get(gpu.CallMap).Calls
			var seen []allocator.TraceEntry
			stop := a.AddObserver(func(e allocator.TraceEntry) { seen = append(seen, e) })
			b := mustMalloc(t, a, 20*mib)
			stop()
			after := a.Stats()
			grew := after.ReservedBytes[allocator.StatAll].Current > before.ReservedBytes[allocator.StatAll].Current
			if grew != c.growing {
				t.Fatalf("reserved %d -> %d, want growth %v", before.ReservedBytes[allocator.StatAll].Current,
					after.ReservedBytes[allocator.StatAll].Current, c.growing)
			}
			if got := after.NumStitches == 1; got != c.stitch {
				t.Fatalf("num_stitches %d", after.NumStitches)
			}
			for _, o := range []*allocator.Block{bs[0], bs[2], bs[4]} {
				if b.Addr() < o.Addr()+o.Size() && o.Addr() < b.Addr()+b.Size() {
					t.Fatalf("block %#x+%d overlaps live %#x+%d", b.Addr(), b.Size(), o.Addr(), o.Size())
				}
			}
			_, hasKey := after.Map()["num_stitches"]
			if hasKey != c.stitch {
				t.Fatalf("num_stitches key present: %v", hasKey)
			}
			if !c.stitch {
				return
			}
			if n := proc.Counters().Get(gpu.CallMap).Calls - maps; n != 10 {
				t.Fatalf("%d cuMemMap calls for a stitch of 10 pages of 2 MiB", n)
			}
			if after.StitchedBytes.Current != 20*mib {
				t.Fatalf("stitched_bytes %d", after.StitchedBytes.Current)
			}
			// Observers and the snapshot see addresses: the holes are
			// unmapped, the stitched range mapped.
			var unmapped, mapped uint64
			for _, e := range seen {
				switch e.Action {
				case allocator.ActionSegmentUnmap:
					unmapped += e.Size
				case allocator.ActionSegmentMap:
					mapped += e.Size
					if e.Addr != b.Addr() {
						t.Fatalf("segment_map at %#x, stitched block at %#x", e.Addr, b.Addr())
					}
				}
			}
			if unmapped != 20*mib || mapped != 20*mib {
				t.Fatalf("observer saw %d bytes unmapped and %d mapped, want 20 MiB each", unmapped, mapped)
			}
			for _, sg := range a.Snapshot().Segments {
				for _, h := range holes {
					// The holes' whole pages start at most a page in.
					if p := h + 2*mib; p >= sg.Address && p < sg.Address+sg.TotalSize {
						t.Fatalf("lent range at %#x shown in segment %#x", p, sg.Address)
					}
				}
			}
			mustFree(t, a, b)
			end := a.Stats()
			if end.StitchedBytes.Current != 0 || end.NumUnstitches != 1 {
				t.Fatalf("after free: stitched_bytes %d, num_unstitches %d", end.StitchedBytes.Current, end.NumUnstitches)
			}
			// The holes are free again: a 10 MiB request takes one.
			if r := mustMalloc(t, a, 10*mib); r.Addr() != holes[0] && r.Addr() != holes[1] {
				t.Fatalf("10 MiB went to %#x, not to a hole", r.Addr())
			}
		})
	}
}

// TestStitchAfterRecordStream: a stitched block freed while another stream
// uses it is unstitched when that stream's event completes.
func TestStitchAfterRecordStream(t *testing.T) {
	proc, a := policyAllocator(t, "stitch", "", 1<<30)
	x := mustMalloc(t, a, 4*mib)
	y := mustMalloc(t, a, 4*mib)
	z := mustMalloc(t, a, 4*mib)
	mustMalloc(t, a, uint64(a.Stats().ReservedBytes[allocator.StatAll].Current)-12*mib)
	mustFree(t, a, x)
	mustFree(t, a, z)
	_ = y
	b := mustMalloc(t, a, 8*mib)
	if a.Stats().NumStitches != 1 {
		t.Fatalf("no stitch")
	}
	if err := a.RecordStream(b, 7); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, b)
	if a.Stats().StitchedBytes.Current == 0 {
		t.Fatal("unstitched before the other stream's event")
	}
	proc.CompleteAllEvents()
	if err := a.ProcessEvents(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.StitchedBytes.Current != 0 || s.NumUnstitches != 1 {
		t.Fatalf("stitched_bytes %d, unstitches %d after the event", s.StitchedBytes.Current, s.NumUnstitches)
	}
}

// TestLifetimeSeparatesPools: optimizer state allocated in the second step
// (the size of the weights, into the holes the step's activations left)
// pins three activation segments under PyTorch's pools; the lifetime policy
// puts it beside the weights, so the activations' segments all go back to
// the device at the end of the step.
func TestLifetimeSeparatesPools(t *testing.T) {
	for _, c := range []struct {
		policy   string
		reserved int64 // after the step and empty_cache
	}{{"pytorch", 80 * mib}, {"lifetime", 40 * mib}} {
		t.Run(c.policy, func(t *testing.T) {
			_, a := policyAllocator(t, c.policy, "", 4<<30)
			for i := 0; i < 6; i++ {
				mustMalloc(t, a, 3*mib) // weights: one 20 MiB segment, 2 MiB left
			}
			step := func() []*allocator.Block {
				var acts []*allocator.Block
				for i := 0; i < 15; i++ {
					acts = append(acts, mustMalloc(t, a, 4*mib)) // three full 20 MiB segments
					mustFree(t, a, mustMalloc(t, a, mib/2))      // a temporary
				}
				return acts
			}
			for _, x := range step() {
				mustFree(t, a, x)
			}
			acts := step()
			for _, i := range []int{0, 5, 10} {
				mustFree(t, a, acts[i]) // a hole in each activation segment
			}
			for i := 0; i < 3; i++ {
				mustMalloc(t, a, 3*mib) // optimizer state
			}
			for i, x := range acts {
				if i%5 != 0 {
					mustFree(t, a, x)
				}
			}
			if err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
			if got := a.Stats().ReservedBytes[allocator.StatAll].Current; got != c.reserved {
				t.Fatalf("reserved after the step and empty_cache: %d MiB, want %d MiB", got/mib, c.reserved/mib)
			}
		})
	}
}

// TestReleaseOversizeSplitAfterToggle: an oversize block of a cudaMalloc
// segment split while expandable_segments was on is not released as if it
// were its whole segment (the invariant checks panic otherwise).
func TestReleaseOversizeSplitAfterToggle(t *testing.T) {
	_, a := policyAllocator(t, "pytorch", "max_split_size_mb:40", 100*mib)
	mustFree(t, a, mustMalloc(t, a, 60*mib))
	cfg := a.Config()
	cfg.ExpandableSegments = true
	if err := a.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	big := mustMalloc(t, a, 45*mib) // splits the 60 MiB segment: 15 MiB stay free
	small := mustMalloc(t, a, 10*mib)
	mustFree(t, a, big) // a cached oversize block, split
	if _, err := a.Malloc(50*mib, 0); err == nil {
		t.Fatal("50 MiB fit beside 60 MiB on a 100 MiB device")
	}
	mustFree(t, a, small)
}

// TestStitchShortfall: a 30 MiB request with one free 10 MiB hole maps only
// the missing 20 MiB and stitches them behind the hole's pages; PyTorch's
// expandable segments map all of it, in 20 MiB pages: 40 MiB.
func TestStitchShortfall(t *testing.T) {
	for _, c := range []struct {
		policy string
		grow   int64
	}{{"pytorch", 40 * mib}, {"stitch", 20 * mib}} {
		t.Run(c.policy, func(t *testing.T) {
			_, a := policyAllocator(t, c.policy, "expandable_segments:True", 1<<30)
			x := mustMalloc(t, a, 10*mib)
			mustMalloc(t, a, 10*mib)
			mustMalloc(t, a, uint64(a.Stats().ReservedBytes[allocator.StatAll].Current)-20*mib) // no free tail
			mustFree(t, a, x)
			before := a.Stats().ReservedBytes[allocator.StatAll].Current
			b := mustMalloc(t, a, 30*mib)
			if got := a.Stats().ReservedBytes[allocator.StatAll].Current - before; got != c.grow {
				t.Fatalf("reserved grew by %d MiB, want %d MiB", got/mib, c.grow/mib)
			}
			mustFree(t, a, b)
		})
	}
}

// TestLifetimeBorrows: after the first step, a transient request that its
// pool cannot serve takes the free tail of the weights' long-lived segment
// instead of a new segment.
func TestLifetimeBorrows(t *testing.T) {
	_, a := policyAllocator(t, "lifetime", "", 4<<30)
	for i := 0; i < 4; i++ {
		mustMalloc(t, a, 4*mib) // weights: 16 MiB of a 20 MiB segment
	}
	var acts []*allocator.Block
	for i := 0; i < 10; i++ {
		acts = append(acts, mustMalloc(t, a, 5*mib))
		mustFree(t, a, mustMalloc(t, a, mib/2))
	}
	for _, x := range acts {
		mustFree(t, a, x) // a trough: the first step is over
	}
	before := a.Stats().ReservedBytes[allocator.StatLarge].Current
	if before != 20*mib {
		t.Fatalf("large pool holds %d MiB after the step, want the weights' 20 MiB segment", before/mib)
	}
	mustMalloc(t, a, 3*mib)
	if after := a.Stats().ReservedBytes[allocator.StatLarge].Current; after != before {
		t.Fatalf("a transient 3 MiB grew the large pool from %d to %d MiB", before/mib, after/mib)
	}
}

package profiler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/trace"
)

// TestReconstructMatchesEager drives random workloads (record-stream
// frees, empty_cache, OOMs, expandable segments) and checks that the state
// reconstructed lazily at the peak equals the one read eagerly at the
// moment of the peak, and that a reconstruction of the present agrees with
// FreeSummary.
func TestReconstructMatchesEager(t *testing.T) {
	confs := []string{"", "expandable_segments:True", "max_split_size_mb:40,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9"}
	for ci, conf := range confs {
		for seed := uint64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("conf%d/seed%d", ci, seed), func(t *testing.T) {
				checkRandomWorkload(t, conf, seed)
			})
		}
	}
}

func checkRandomWorkload(t *testing.T, conf string, seed uint64) {
	card, err := gpu.New(gpu.Options{Capacity: 600 << 20, NoContextOverhead: true})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := card.NewProcess()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(proc, cfg, allocator.WithInvariantChecks())
	if err != nil {
		t.Fatal(err)
	}
	p := New(nil, Options{MaxSamples: 16, OOMCaptures: -1})
	p.Attach(0, a, proc)
	d := p.devs[0]
	rng := rand.New(rand.NewPCG(seed, 99))
	type live struct {
		b     *allocator.Block
		stack trace.StackID
	}
	var blocks []live
	var eager *Capture
	sizes := []uint64{700, 4000, 65536, 1<<20 + 3, 3 << 20, 9 << 20, 12<<20 + 77, 40 << 20, 90 << 20}
	idx := int64(0)
	step := func() { p.Step(idx, &trace.Event{}); idx++ }
	for i := 0; i < 1500; i++ {
		switch r := rng.IntN(100); {
		case r < 48 || len(blocks) == 0:
			stack := trace.StackID(1 + rng.IntN(6))
			b, err := a.Malloc(sizes[rng.IntN(len(sizes))]+uint64(rng.IntN(4096)), allocator.Stream(rng.IntN(2)))
			if err != nil {
				var oom *allocator.OutOfMemoryError
				if !errors.As(err, &oom) {
					t.Fatal(err)
				}
				p.OOM(0, idx, oom)
				step()
				continue
			}
			before := p.total.peakLive
			p.Alloc(0, idx, b, stack)
			if p.total.peakLive > before {
				eager = p.reconstruct(p.order, []int{len(d.log)}, idx, p.total.peakLive, p.total.requestedAtPeak, p.total.reservedAtPeak)
			}
			blocks = append(blocks, live{b, stack})
		case r < 88:
			k := rng.IntN(len(blocks))
			lb := blocks[k]
			blocks[k] = blocks[len(blocks)-1]
			blocks = blocks[:len(blocks)-1]
			// A stream use recorded before the Free is reported (a
			// record_stream of the trace), or after it, just before
			// the allocator's free (the replay's private stream for a
			// free the trace completes later): the profiler starts
			// watching free_completed at either (see observed).
			switch rng.IntN(8) {
			case 0, 1:
				if err := a.RecordStream(lb.b, 7); err != nil {
					t.Fatal(err)
				}
				p.Free(0, idx, lb.b, lb.stack)
			case 2:
				p.Free(0, idx, lb.b, lb.stack)
				if err := a.RecordStream(lb.b, 7); err != nil {
					t.Fatal(err)
				}
			default:
				p.Free(0, idx, lb.b, lb.stack)
			}
			if err := a.Free(lb.b); err != nil {
				t.Fatal(err)
			}
		case r < 95:
			proc.CompleteEvents(7)
			if err := a.ProcessEvents(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
		}
		step()
		if i%97 == 0 {
			now := p.reconstruct(p.order, []int{len(d.log)}, idx, d.live, d.requested, d.reserved)
			free, largest := a.FreeSummary()
			if now.FreeBytes != free || now.LargestFreeBlockBytes != largest {
				t.Fatalf("step %d: reconstructed free %d largest %d; FreeSummary %d %d", i, now.FreeBytes, now.LargestFreeBlockBytes, free, largest)
			}
			if want := snapshotLayout(a); fmt.Sprint(withoutStacks(now.Layout)) != fmt.Sprint(want) {
				t.Fatalf("step %d: reconstructed layout %v\nsnapshot %v", i, now.Layout, want)
			}
			if sumLive(now) != d.live {
				t.Fatalf("step %d: reconstructed live %d, counted %d", i, sumLive(now), d.live)
			}
		}
	}
	kinds := map[logKind]int{}
	for _, e := range d.log {
		kinds[e.kind]++
	}
	t.Logf("log at the end: %d entries %v; peak at %d of %d", len(d.log), kinds, p.total.peakLiveEvent, idx)
	prof := p.Finish()
	if eager == nil {
		t.Fatal("no peak")
	}
	got := prof.Peak
	if got.Event != eager.Event || got.FreeBytes != eager.FreeBytes || got.LargestFreeBlockBytes != eager.LargestFreeBlockBytes ||
		got.StrandedBytes != eager.StrandedBytes || got.Segments != eager.Segments || got.PinnedSegments != eager.PinnedSegments {
		t.Fatalf("lazy %+v\neager %+v", *got, *eager)
	}
	if fmt.Sprint(got.Sites) != fmt.Sprint(eager.Sites) {
		t.Fatalf("sites: lazy %v\neager %v", got.Sites, eager.Sites)
	}
	if fmt.Sprint(got.Layout) != fmt.Sprint(eager.Layout) {
		t.Fatalf("layout: lazy %v\neager %v", got.Layout, eager.Layout)
	}
	if sumLive(got) != got.LiveBytes {
		t.Fatalf("live by site %d, at peak %d", sumLive(got), got.LiveBytes)
	}
}

// snapshotLayout is the allocator's present state as a capture's layout
// (stacks aside: the snapshot has none).
func snapshotLayout(a *allocator.Allocator) []SegmentLayout {
	var out []SegmentLayout
	for _, s := range a.Snapshot().Segments {
		sl := SegmentLayout{Stream: uint64(s.Stream), Address: s.Address, Size: s.TotalSize, Expandable: s.IsExpandable, Blocks: []BlockLayout{}}
		for _, b := range s.Blocks {
			if b.State == allocator.StateInactive {
				continue
			}
			sl.Blocks = append(sl.Blocks, BlockLayout{Offset: b.Address - s.Address, Size: b.Size, Allocated: b.State == allocator.StateActiveAllocated})
		}
		out = append(out, sl)
	}
	return out
}

func withoutStacks(l []SegmentLayout) []SegmentLayout {
	out := make([]SegmentLayout, len(l))
	for i, s := range l {
		s.Blocks = append([]BlockLayout(nil), s.Blocks...)
		for j := range s.Blocks {
			s.Blocks[j].Stack = 0
		}
		out[i] = s
	}
	return out
}

func sumLive(c *Capture) uint64 {
	var n uint64
	for _, s := range c.Sites {
		n += s.LiveBytes
	}
	return n
}

// TestDeferredFreeAtPeak: a block whose free waits for another stream's
// work is pending at the peak and back in its pool when the peak's state
// is reconstructed, so the reconstruction must undo its return. The
// profiler observes those returns only from the first record_stream on
// (see observed): with the stream use recorded before the Free is
// reported (a trace's record_stream, no Step between) and after it (the
// replay's private stream), the lazy capture must equal the state read at
// the peak itself.
func TestDeferredFreeAtPeak(t *testing.T) {
	for _, useFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("recordStreamFirst=%v", useFirst), func(t *testing.T) {
			card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
			if err != nil {
				t.Fatal(err)
			}
			proc, err := card.NewProcess()
			if err != nil {
				t.Fatal(err)
			}
			a, err := allocator.New(proc, config.Default(), allocator.WithInvariantChecks())
			if err != nil {
				t.Fatal(err)
			}
			p := New(nil, Options{MaxSamples: 16, OOMCaptures: -1})
			p.Attach(0, a, proc)
			p.Restored(0)
			idx := int64(0)
			step := func() { p.Step(idx, &trace.Event{}); idx++ }
			alloc := func(size uint64, stack trace.StackID) *allocator.Block {
				b, err := a.Malloc(size, 0)
				if err != nil {
					t.Fatal(err)
				}
				p.Alloc(0, idx, b, stack)
				step()
				return b
			}
			free := func(b *allocator.Block, stack trace.StackID) {
				p.Free(0, idx, b, stack)
				if err := a.Free(b); err != nil {
					t.Fatal(err)
				}
				step()
			}
			alloc(10<<20, 1)
			b := alloc(30<<20, 2)
			if useFirst {
				if err := a.RecordStream(b, 7); err != nil {
					t.Fatal(err)
				}
				p.Free(0, idx, b, 2)
			} else {
				p.Free(0, idx, b, 2)
				if err := a.RecordStream(b, 7); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Free(b); err != nil {
				t.Fatal(err)
			}
			step()
			y := alloc(50<<20, 3) // the peak: b still pending
			d := p.devs[0]
			eager := p.reconstruct(p.order, []int{len(d.log)}, p.total.peakLiveEvent, p.total.peakLive, p.total.requestedAtPeak, p.total.reservedAtPeak)
			free(y, 3)
			proc.CompleteEvents(7)
			if err := a.ProcessEvents(); err != nil {
				t.Fatal(err)
			}
			step()
			got := p.Finish().Peak
			if got.Event != eager.Event || fmt.Sprint(got.Layout) != fmt.Sprint(eager.Layout) || got.FreeBytes != eager.FreeBytes {
				t.Fatalf("lazy capture %d free %d layout %v\nat the peak %d free %d layout %v",
					got.Event, got.FreeBytes, got.Layout, eager.Event, eager.FreeBytes, eager.Layout)
			}
		})
	}
}

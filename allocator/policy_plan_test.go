package allocator_test

import (
	"math/rand/v2"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// trainingStep is a toy training step: a forward pass that keeps
// activations of mixed sizes (with a temporary freed at once after some of
// them), then a backward pass that frees them in reverse order. Sizes are
// chosen so that PyTorch's best fit strands bytes between them.
var trainingStep = []uint64{3 * mib, 12 * mib, 5*mib + 512, 700 << 10, 22 * mib, 9 * mib, 2 * mib, 17 * mib, 4 * mib, 30 * mib}

// runStep runs one step; keep, when set, is called with each activation and
// may keep it alive past the step (it then frees it itself).
func runStep(t *testing.T, a *allocator.Allocator, sizes []uint64) {
	t.Helper()
	var acts []*allocator.Block
	for i, s := range sizes {
		acts = append(acts, mustMalloc(t, a, s))
		if i%3 == 1 {
			mustFree(t, a, mustMalloc(t, a, s/2+mib))
		}
	}
	for i := len(acts) - 1; i >= 0; i-- {
		mustFree(t, a, acts[i])
	}
}

func planStats(t *testing.T, a *allocator.Allocator) allocator.PlanStats {
	t.Helper()
	s, ok := a.PlanStats()
	if !ok {
		t.Fatal("PlanStats: not the plan policy")
	}
	return s
}

// TestPlanServesRepeatingSteps: after a few identical steps the plan
// policy serves every block of a step from its arena, at the same address
// each step, and reserves no more than the weights plus the step's peak of
// live bytes rounded up to 2 MiB.
func TestPlanServesRepeatingSteps(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:False"} {
		_, a := policyAllocator(t, "plan", conf, 4<<30)
		for i := 0; i < 8; i++ {
			mustMalloc(t, a, 40*mib) // weights
		}
		// The first trough is at the end of step 1; steps 2 and 3 match,
		// the plan is made during step 4 and its arena at step 5's start.
		for i := 0; i < 5; i++ {
			runStep(t, a, trainingStep)
		}
		s := planStats(t, a)
		if s.Plans != 1 || s.Arena == 0 || s.Abandoned != 0 {
			t.Fatalf("after 5 steps: %+v, want one plan with an arena", s)
		}
		a.ResetPeakStats()
		var addrs [2][]uint64
		for k := range addrs {
			seen := a.AddObserver(func(e allocator.TraceEntry) {
				if e.Action == allocator.ActionAlloc {
					addrs[k] = append(addrs[k], e.Addr)
				}
			})
			before := planStats(t, a).Served
			runStep(t, a, trainingStep)
			seen()
			per := len(trainingStep) + len(trainingStep)/3
			if got := planStats(t, a).Served - before; got != per {
				t.Fatalf("step %d: %d requests served from the arena, want all %d", k, got, per)
			}
		}
		for i := range addrs[0] {
			if addrs[0][i] != addrs[1][i] {
				t.Fatalf("request %d at %#x, then at %#x: the plan moved", i, addrs[0][i], addrs[1][i])
			}
		}
		var live, peakLive uint64
		for i, sz := range trainingStep {
			live += roundTo(sz, 512)
			if i%3 == 1 {
				peakLive = max(peakLive, live+roundTo(sz/2+mib, 512))
			}
			peakLive = max(peakLive, live)
		}
		st := a.Stats()
		want := 8*40*mib + roundTo(peakLive, 2*mib)
		if got := uint64(st.ReservedBytes[allocator.StatAll].Peak); got > want {
			t.Fatalf("%q: peak reserved %d MiB over planned steps, want at most %d MiB", conf, got/mib, want/mib)
		}
	}
}

func roundTo(x, m uint64) uint64 { return (x + m - 1) / m * m }

// TestPlanAbandonsOnAnotherSize: a request of another size at a planned
// position abandons the plan; the arena becomes an ordinary segment of the
// large pool (the block already in it stays valid, the invariant checks
// run after every operation), whose free bytes serve online requests
// without a device call and which goes back to the device once free.
func TestPlanAbandonsOnAnotherSize(t *testing.T) {
	proc, a := policyAllocator(t, "plan", "", 4<<30)
	mustMalloc(t, a, 100*mib)
	for i := 0; i < 5; i++ {
		runStep(t, a, trainingStep)
	}
	s := planStats(t, a)
	if s.Plans != 1 || s.Arena == 0 {
		t.Fatalf("%+v: want a plan with an arena", s)
	}
	arena := s.Arena
	x := mustMalloc(t, a, trainingStep[0])
	y := mustMalloc(t, a, 13*mib) // the plan expects 12 MiB here
	if s := planStats(t, a); s.Abandoned != 1 || s.Arena != 0 || s.Step != 0 {
		t.Fatalf("%+v: want the plan abandoned and no arena", s)
	}
	if x.Addr() == y.Addr() {
		t.Fatal("the two blocks share an address")
	}
	// The former arena's free bytes serve the online path.
	mallocs := proc.Counters().Get(gpu.CallMalloc).Calls
	z := mustMalloc(t, a, trainingStep[1])
	if n := proc.Counters().Get(gpu.CallMalloc).Calls; n != mallocs {
		t.Fatalf("%d cudaMalloc for a request the former arena could hold", n-mallocs)
	}
	reserved := a.Stats().ReservedBytes[allocator.StatAll].Current
	mustFree(t, a, x)
	mustFree(t, a, y)
	mustFree(t, a, z)
	if got := a.Stats().ReservedBytes[allocator.StatAll].Current; reserved-got < int64(arena) {
		t.Fatalf("freeing its blocks released %d bytes, want at least the former arena's %d", reserved-got, arena)
	}
	// Steps of the new shape are planned again.
	changed := append([]uint64{13 * mib}, trainingStep[1:]...)
	for i := 0; i < 5; i++ {
		runStep(t, a, changed)
	}
	if s := planStats(t, a); s.Plans != 2 || s.Arena == 0 {
		t.Fatalf("%+v: want a second plan for the new step", s)
	}
}

// TestPlanMissesTakenBytes: a block kept alive past its step holds bytes
// the plan gives to a later request; that request is served online, and
// the plan holds.
func TestPlanMissesTakenBytes(t *testing.T) {
	_, a := policyAllocator(t, "plan", "", 4<<30)
	for i := 0; i < 5; i++ {
		runStep(t, a, trainingStep)
	}
	// One step by hand: keep the first activation alive to the end.
	var acts []*allocator.Block
	for i, s := range trainingStep {
		acts = append(acts, mustMalloc(t, a, s))
		if i%3 == 1 {
			mustFree(t, a, mustMalloc(t, a, s/2+mib))
		}
	}
	for i := len(acts) - 1; i >= 1; i-- {
		mustFree(t, a, acts[i])
	}
	kept := acts[0]
	before := planStats(t, a)
	first := mustMalloc(t, a, trainingStep[0])
	after := planStats(t, a)
	if after.Missed != before.Missed+1 || after.Abandoned != 0 {
		t.Fatalf("before %+v, after %+v: want one miss and the plan kept", before, after)
	}
	if first.Addr() == kept.Addr() {
		t.Fatal("the request got the kept block's address")
	}
	mustFree(t, a, first)
	mustFree(t, a, kept)
}

// TestPlanPerturbedSteps runs repeating steps with random changes (a free
// delayed to the next step, a size changed, a record_stream, an
// empty_cache) under invariant checks: whatever the plan expected, no two
// blocks overlap and the statistics stay true.
func TestPlanPerturbedSteps(t *testing.T) {
	served, missed, abandoned := 0, 0, 0
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 14))
		proc, a := policyAllocator(t, "plan", []string{"", "expandable_segments:False"}[seed%2], 4<<30)
		var late []*allocator.Block
		for step := 0; step < 16; step++ {
			var acts []*allocator.Block
			for i, s := range trainingStep {
				if r.IntN(150) == 0 {
					s += 512 * uint64(1+r.IntN(4096))
				}
				acts = append(acts, mustMalloc(t, a, s))
				if i%3 == 1 {
					mustFree(t, a, mustMalloc(t, a, s/2+mib))
				}
			}
			for _, b := range late {
				mustFree(t, a, b)
			}
			late = late[:0]
			for i := len(acts) - 1; i >= 0; i-- {
				switch r.IntN(30) {
				case 0:
					late = append(late, acts[i])
					continue
				case 1:
					if err := a.RecordStream(acts[i], 1); err != nil {
						t.Fatal(err)
					}
				case 2:
					if err := a.EmptyCache(); err != nil {
						t.Fatal(err)
					}
				}
				mustFree(t, a, acts[i])
			}
			proc.CompleteAllEvents()
			if err := a.ProcessEvents(); err != nil {
				t.Fatal(err)
			}
		}
		s := planStats(t, a)
		served += s.Served
		missed, abandoned = missed+s.Missed, abandoned+s.Abandoned
		if s.Plans == 0 {
			t.Fatalf("seed %d: %+v: no plan in 16 steps", seed, s)
		}
	}
	t.Logf("served %d, missed %d, abandoned %d", served, missed, abandoned)
	if served == 0 || missed == 0 || abandoned == 0 {
		t.Fatalf("served %d, missed %d, abandoned %d: the perturbations did not reach every path", served, missed, abandoned)
	}
}

package allocator_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memreplay/memreplay/allocator"
)

// The free sets keep the blocks inserted last out of their buckets (the hot
// blocks, freeset.go), and best fit, the release paths and the summaries
// answer from them beside the buckets. TestHotBlockSameDecisions runs every
// policy and setting of the property test twice on the same random
// operations, once with hot blocks and once with every block put in its
// bucket at once (WithColdFreeSets), both with the invariant checks on, and
// requires the same trace entries (every block handed out, by address and
// size, every segment mapped or freed), the same live blocks and the same
// statistics after every step, and the same snapshot and free summary at
// the end. A hot block that best fit returned where the buckets or the
// other hot blocks hold a smaller or lower one, or missed, would change an
// address.
func TestHotBlockSameDecisions(t *testing.T) {
	eachPropertyCase(t, 2, 2000, 400, hotColdRun)
}

func hotColdRun(t *testing.T, policy, conf string, ci int, seed uint64, steps int) {
	hot := newDriver(t, conf, policy, 600<<20)
	cold := newDriver(t, conf, policy, 600<<20, allocator.WithColdFreeSets())
	var hotTrace, coldTrace []allocator.TraceEntry
	hot.a.AddObserver(func(e allocator.TraceEntry) { hotTrace = append(hotTrace, e) })
	cold.a.AddObserver(func(e allocator.TraceEntry) { coldTrace = append(coldTrace, e) })
	r := rand.New(rand.NewPCG(seed, 100+uint64(ci)))
	for i := 0; i < steps; i++ {
		// Half the frees take the block allocated last, as a training
		// step's temporaries go: the pattern the hot blocks serve.
		o := op{kind: uint8(r.IntN(16)), size: randomSize(r), pick: r.Uint32(), stream: uint8(r.IntN(8))}
		if r.IntN(2) == 0 {
			o.pick = uint32(len(hot.live) - 1) // the block allocated last
		}
		hot.step(o)
		cold.step(o)
		if !slices.Equal(hotTrace, coldTrace) {
			t.Fatalf("step %d: trace entries differ:\nhot  %v\ncold %v", i, tail(hotTrace), tail(coldTrace))
		}
		if len(hot.live) != len(cold.live) {
			t.Fatalf("step %d: %d live blocks, %d without hot blocks", i, len(hot.live), len(cold.live))
		}
		for j, b := range hot.live {
			if c := cold.live[j]; b.Addr() != c.Addr() || b.Size() != c.Size() {
				t.Fatalf("step %d: live block %#x+%d, %#x+%d without hot blocks", i, b.Addr(), b.Size(), c.Addr(), c.Size())
			}
		}
		if hs, cs := hot.a.Stats(), cold.a.Stats(); hs != cs {
			t.Fatalf("step %d: statistics differ:\nhot  %v\ncold %v", i, hs.String(), cs.String())
		}
		hotTrace, coldTrace = hotTrace[:0], coldTrace[:0]
	}
	if h, c := fmt.Sprint(hot.a.Snapshot()), fmt.Sprint(cold.a.Snapshot()); h != c {
		t.Fatalf("snapshots differ:\nhot  %s\ncold %s", h, c)
	}
	if h, c := fmt.Sprint(hot.a.FreeSummary()), fmt.Sprint(cold.a.FreeSummary()); h != c {
		t.Fatalf("free summaries differ: hot %s, cold %s", h, c)
	}
}

func tail(es []allocator.TraceEntry) []allocator.TraceEntry {
	return es[max(0, len(es)-4):]
}

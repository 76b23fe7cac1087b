package par_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/trace"
)

const (
	miB = uint64(1) << 20
	giB = uint64(1) << 30
)

// fragmenting draws a trial that fragments a caching allocator the way a
// run with growing shapes does: weights held throughout, then steps whose
// activation grows a little each time and after which a small tensor is
// kept (a metric, a logits buffer). The kept tensor lands in the hole the
// freed activation left and pins its segment, so the default allocator
// holds a segment per step, while expandable segments unmap the free
// pages when the allocator retries. Sizes scale with the draw.
func fragmenting(rng *rand.Rand) par.Trial {
	weights := (200 + rng.Uint64N(400)) * miB
	act := (150 + rng.Uint64N(250)) * miB
	steps := 6 + rng.IntN(6)
	label := fmt.Sprintf("w%d a%d x%d", weights/miB, act/miB, steps)
	t := &trace.Trace{Header: trace.Header{Source: "test"}, Stacks: trace.NewStacks()}
	now := int64(0)
	addr := uint64(0x10000)
	add := func(a trace.Action, at, size uint64) {
		now += 1000 // 1 ms per request
		t.Events = append(t.Events, trace.Event{Action: a, Addr: at, Size: size, TimeUS: now})
	}
	alloc := func(size uint64) uint64 { addr += 0x1000; add(trace.ActionAlloc, addr, size); return addr }
	free := func(a uint64) { add(trace.ActionFreeRequested, a, 0); add(trace.ActionFreeCompleted, a, 0) }
	add(trace.ActionTrialStart, 0, 0)
	w := alloc(weights)
	var kept []uint64
	for i := 0; i < steps; i++ {
		a := alloc(act + uint64(i)*16*miB)
		free(a)
		kept = append(kept, alloc(12*miB))
	}
	for _, k := range kept {
		free(k)
	}
	free(w)
	add(trace.ActionTrialEnd, 0, 0)
	t.Events[0].Label = label
	return par.Trial{Label: label, Open: func() (trace.Reader, error) { return t.NewReader(), nil },
		Duration: time.Duration(now) * time.Microsecond}
}

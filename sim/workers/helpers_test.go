package workers_test

import (
	"math/rand/v2"
	"time"

	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

const (
	kiB = uint64(1) << 10
	miB = uint64(1) << 20
	giB = uint64(1) << 30
)

// build writes a trial's events: ops are allocs (size > 0, "a<id>") and
// frees, each step microseconds after the previous.
type build struct {
	t    *trace.Trace
	now  int64
	next uint64
	step int64
}

func newBuild(label string, step time.Duration) *build {
	b := &build{
		t:    &trace.Trace{Header: trace.Header{Source: "test", Devices: []trace.Device{{Index: 0}}}, Stacks: trace.NewStacks()},
		next: 0x1000,
		step: step.Microseconds(),
	}
	b.t.Events = append(b.t.Events, trace.Event{Action: trace.ActionTrialStart, Label: label})
	return b
}

func (b *build) tick() int64 { b.now += b.step; return b.now }

// alloc requests size bytes and returns the recorded address naming it.
func (b *build) alloc(size uint64) uint64 {
	a := b.next
	b.next += 0x1000
	b.t.Events = append(b.t.Events, trace.Event{Action: trace.ActionAlloc, Addr: a, Size: size, TimeUS: b.tick()})
	return a
}

func (b *build) free(addr uint64) {
	b.t.Events = append(b.t.Events, trace.Event{Action: trace.ActionFreeRequested, Addr: addr, TimeUS: b.tick()})
	b.t.Events = append(b.t.Events, trace.Event{Action: trace.ActionFreeCompleted, Addr: addr, TimeUS: b.now})
}

func (b *build) add(e trace.Event) {
	e.TimeUS = b.tick()
	b.t.Events = append(b.t.Events, e)
}

func (b *build) done() *trace.Trace {
	b.t.Events = append(b.t.Events, trace.Event{Action: trace.ActionTrialEnd, TimeUS: b.tick()})
	return b.t
}

// duration is the trial's compute alone: the rebased TimeUS of its last
// event.
func duration(t *trace.Trace) time.Duration {
	first, last := t.Events[0].TimeUS, t.Events[len(t.Events)-1].TimeUS
	return time.Duration(last-first) * time.Microsecond
}

// simple is a trial that allocates sizes in turn, holding them all, then
// frees them in order.
func simple(label string, step time.Duration, sizes ...uint64) *trace.Trace {
	b := newBuild(label, step)
	var addrs []uint64
	for _, s := range sizes {
		addrs = append(addrs, b.alloc(s))
	}
	for _, a := range addrs {
		b.free(a)
	}
	return b.done()
}

func task(id int, t *trace.Trace) workers.Task {
	return workers.Task{ID: id, Label: t.Events[0].Label, Open: func() (trace.Reader, error) { return t.NewReader(), nil }}
}

// queue hands each worker its own list of trials in turn.
func queue(lists ...[]*trace.Trace) func(w int, now time.Duration) (workers.Task, bool) {
	pos := make([]int, len(lists))
	id := 0
	return func(w int, now time.Duration) (workers.Task, bool) {
		if w >= len(lists) || pos[w] >= len(lists[w]) {
			return workers.Task{}, false
		}
		t := lists[w][pos[w]]
		pos[w]++
		id++
		return task(id, t), true
	}
}

// collect returns a Done that appends results.
func collect(rs *[]workers.TaskResult) func(workers.TaskResult) error {
	return func(r workers.TaskResult) error { *rs = append(*rs, r); return nil }
}

// training is a trial shaped like a training run: weights held throughout,
// then steps whose activations (sizes drawn from seed) are allocated layer by
// layer and freed in reverse, with a small temporary per layer.
func training(label string, seed uint64, layers, steps int, scale uint64) *trace.Trace {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := newBuild(label, 50*time.Microsecond)
	var weights []uint64
	for i := 0; i < layers; i++ {
		weights = append(weights, b.alloc(scale*(1+rng.Uint64N(4))))
	}
	act := make([]uint64, layers)
	for i := range act {
		act[i] = scale/2 + rng.Uint64N(scale)
	}
	for s := 0; s < steps; s++ {
		var live []uint64
		for i := 0; i < layers; i++ {
			live = append(live, b.alloc(act[i]))
			tmp := b.alloc(64*kiB + rng.Uint64N(512*kiB))
			b.free(tmp)
		}
		for i := len(live) - 1; i >= 0; i-- {
			b.free(live[i])
		}
	}
	for _, w := range weights {
		b.free(w)
	}
	return b.done()
}

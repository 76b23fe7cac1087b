package packing

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
)

// Predictor predicts one trial's peak reserved bytes when it runs alone.
// It is the seam for a better predictor: anything with this signature
// plugs in (Options.Predict).
type Predictor func(trial.Spec) (reservedBytes uint64)

// Analytic is sim/trial's pre-trial estimate (Spec.Estimate): peak live
// bytes counted by hand, no replay. It leaves out what only a replay sees
// (temporaries, the allocator's rounding and fragmentation), so on the
// BERT-family study a trial reserves 1.0 to 2.4 times it; the scheduler's
// learned ratio covers that.
func Analytic(s trial.Spec) uint64 { return s.Estimate().PeakBytes }

// Replay predicts by running the trial model alone, in one process with
// allocator setting cfg and policy pol (nil: PyTorch's), on the card (capacity, one context of ctx bytes;
// 0: gpu.DefaultContextOverhead): its peak reserved. In this simulator that
// is what the trial will reserve when it runs beside others that leave it
// that much (each process has its own allocator, and with room no
// cudaMalloc fails), so the prediction is exact here; on a real GPU its
// error is the trial model's (docs/trial-model.md). A trial that fits
// alone only because its allocator released its cache and retried
// predicts its peak under that pressure, close to the card's size, so it
// runs alone; one that runs out of memory even alone predicts more than
// the card (the scheduler rejects it). Predictions are kept by the spec's
// label; safe for concurrent use, and a spec asked for while another
// goroutine replays it waits for that replay instead of running its own
// (Prefetch).
func Replay(cfg config.Config, pol allocator.Policy, capacity, ctx uint64) Predictor {
	type entry struct {
		done chan struct{}
		p    uint64
	}
	var mu sync.Mutex
	seen := map[string]*entry{}
	return func(s trial.Spec) uint64 {
		key := s.String()
		mu.Lock()
		e, ok := seen[key]
		if !ok {
			e = &entry{done: make(chan struct{})}
			seen[key] = e
		}
		mu.Unlock()
		if ok {
			<-e.done
			return e.p
		}
		e.p = replayAlone(cfg, pol, capacity, ctx, s)
		close(e.done)
		return e.p
	}
}

// Prefetch asks pred for specs, in order, on parallel goroutines (0: one
// per CPU but one, at least one), so that a predictor that keeps its
// answers (Replay) has them ready when the scheduler, on the simulated
// clock's one goroutine, asks. The answers are the same whoever computes
// them first, so the schedule does not depend on the cores. stop ends the
// prefetch (a replay under way finishes) and waits for it.
func Prefetch(pred Predictor, specs []trial.Spec, parallel int) (stop func()) {
	if parallel <= 0 {
		parallel = max(1, runtime.GOMAXPROCS(0)-1)
	}
	var next atomic.Int64
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for range min(parallel, len(specs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(specs) {
					return
				}
				pred(specs[i])
			}
		}()
	}
	return func() {
		stopped.Store(true)
		wg.Wait()
	}
}

// replayAlone is the trial's peak reserved alone, or the capacity when it
// does not complete alone; a trial that cannot be generated predicts
// nothing (0), and fails when it runs.
func replayAlone(cfg config.Config, pol allocator.Policy, capacity, ctx uint64, s trial.Spec) uint64 {
	given := false
	var peak uint64
	_, err := workers.Run(workers.Options{
		GPU:         gpu.Options{Name: "predict", Capacity: capacity, ContextOverhead: ctx},
		Alloc:       &cfg,
		AllocPolicy: pol,
		Workers:     1,
		Next: func(int, time.Duration) (workers.Task, bool) {
			if given {
				return workers.Task{}, false
			}
			given = true
			return workers.Task{ID: 1, Label: s.String(), Open: s.Reader}, true
		},
		Done: func(r workers.TaskResult) error {
			peak = r.PeakReserved
			if r.Outcome != workers.Completed {
				peak = capacity // with its context, more than the card
			}
			return nil
		},
	})
	if err != nil {
		return 0
	}
	return peak
}

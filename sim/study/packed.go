package study

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/packing"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
)

// Schedules: how trials are given to the workers.
const (
	FixedSchedule  = "fixed"  // Workers processes, each taking the next trial when free (PAR)
	PackedSchedule = "packed" // sim/packing: a trial starts when its predicted memory fits
)

// Predictors of a trial's peak reserved, by the name the state file keeps.
const (
	ReplayPredictor   = "replay"   // the trial model run alone (packing.Replay); the default
	AnalyticPredictor = "analytic" // trial.Spec.Estimate, corrected by the learned ratio
	EstimatePredictor = "estimate" // sim/estimate (memreplay estimate): 3 steps replayed alone
)

// Packing configures the packed schedule (sim/packing).
type Packing struct {
	// Predict names the predictor: ReplayPredictor (default),
	// EstimatePredictor or AnalyticPredictor.
	Predict string
	// Margin is the starting safety margin (0: packing's default, 5%).
	Margin float64
}

// predictor is the named predictor and the ratio to start from: the
// analytic estimate learns its correction from probes, the replay is
// exact in simulation.
func (s *study) predictor() (packing.Predictor, float64, error) {
	switch s.o.Packing.Predict {
	case "", ReplayPredictor:
		return packing.Replay(s.cfg, s.pol, s.o.Capacity, s.o.ContextOverhead), 1, nil
	case EstimatePredictor:
		return s.estimatePredictor(), 1, nil
	case AnalyticPredictor:
		return packing.Analytic, 0, nil
	}
	return nil, 0, fmt.Errorf("predict %q: want %s, %s or %s", s.o.Packing.Predict, ReplayPredictor, EstimatePredictor, AnalyticPredictor)
}

// estimatePredictor is `memreplay estimate`'s prediction (sim/estimate)
// under the study's allocator setting and policy: the trial model replayed
// alone for a few steps, which reaches the whole trial's peaks
// (estimate.TestShortRunMatchesFullTrial), so it is the same figure a
// python/memreplay gate admits a trial by. The scheduler adds the context
// itself, so the prediction is peak reserved alone. A trial that cannot be
// generated predicts nothing (0) and fails when it runs. Predictions are
// kept by spec (the seed matters only to dynamic padding's draws).
//
// The estimate runs on a device without a limit, so a trial whose peak is
// more than the card may still complete alone on it, its allocator
// releasing the cache and retrying under the pressure; only the whole
// trial run on the card tells (packing.Replay), so such a trial is asked
// of it rather than rejected.
func (s *study) estimatePredictor() packing.Predictor {
	cfg := s.cfg
	est := &estimates{o: estimate.Options{Config: &cfg, Policy: s.pol, ContextOverhead: s.o.ContextOverhead}}
	onCard := packing.Replay(cfg, s.pol, s.o.Capacity, s.o.ContextOverhead)
	return func(sp trial.Spec) uint64 {
		pr, err := est.get(sp)
		if err != nil {
			return 0
		}
		if pr.PeakReservedBytes+s.context() > s.o.Capacity {
			return onCard(sp) // packing.Replay keeps its own answers
		}
		return pr.PeakReservedBytes
	}
}

// estimates keeps estimate.Spec's predictions (and errors) by spec under
// one set of options; a spec's seed matters only to dynamic padding's
// draws. Safe for concurrent use (packing.Prefetch asks from other
// goroutines).
type estimates struct {
	o  estimate.Options
	mu sync.Mutex
	m  map[trial.Spec]estimated
}

type estimated struct {
	p   estimate.Prediction
	err error
}

func (e *estimates) get(sp trial.Spec) (estimate.Prediction, error) {
	key := sp
	if !key.DynamicPadding {
		key.Seed = 0
	}
	e.mu.Lock()
	r, ok := e.m[key]
	e.mu.Unlock()
	if !ok {
		r.p, r.err = estimate.Spec(sp, e.o)
		e.mu.Lock()
		if e.m == nil {
			e.m = map[trial.Spec]estimated{}
		}
		e.m[key] = r
		e.mu.Unlock()
	}
	return r.p, r.err
}

// packed wires a packing.Scheduler into the engine's options: trials come
// from the study's sequence, a trial predicted not to fit even alone is
// recorded as pruned_estimate, and every trial runs in its own process.
//
// With the replay or estimate predictor, the trials still to run are
// replayed alone on the other cores ahead of the clock (packing.Prefetch); stop ends that
// when the run is over.
func (s *study) packed(wo *workers.Options) (sched *packing.Scheduler, stop func(), err error) {
	pred, prior, err := s.predictor()
	if err != nil {
		return nil, nil, err
	}
	stop = func() {}
	if s.o.Packing.Predict != AnalyticPredictor {
		var specs []trial.Spec
		for id := s.next; id < s.planned; id++ {
			if !s.done[id] {
				specs = append(specs, s.specFor(id))
			}
		}
		stop = packing.Prefetch(pred, specs, 0)
	}
	sched, err = packing.New(packing.Options{
		Capacity: s.o.Capacity, ContextOverhead: s.o.ContextOverhead,
		Predict: pred, PriorRatio: prior, Margin: s.o.Packing.Margin,
		Source: func() (packing.Item, bool) {
			id, sp, ok := s.nextSpec()
			if !ok {
				return packing.Item{}, false
			}
			return packing.Item{ID: id, Label: sp.String(), Spec: sp, Open: sp.Reader}, true
		},
		Reject: func(it packing.Item, need uint64, at time.Duration) error {
			us := s.offsetUS + at.Microseconds()
			return s.record(Record{Kind: "trial", ID: it.ID, Label: it.Label, Spec: specJSON(it.Spec), Worker: -1,
				Outcome: PrunedEstimate, StartUS: us, EndUS: us,
				Error:         fmt.Sprintf("predicted %s with its context > %s capacity: cannot fit even alone", gib(need), gib(s.o.Capacity)),
				EstimateBytes: need - s.context(), Run: s.runIdx})
		},
	})
	if err != nil {
		stop()
		return nil, nil, err
	}
	wo.Policy = packing.Policy(wo.Policy)
	wo.Hold, wo.Next = sched.Hold, sched.Next
	done := wo.Done
	wo.Done = func(r workers.TaskResult) error {
		sched.Done(r)
		if err := done(r); err != nil {
			return err
		}
		return sched.Err()
	}
	return sched, stop, nil
}

// DefaultPackedMax is how many trials the packed schedule runs at most at
// once unless told: a cap on processes, not on memory, which the
// scheduler watches.
const DefaultPackedMax = 8

// CompareSchedules runs the study with o's trials and policies at fixed PAR
// 1..maxPAR and packed (with o.Workers as its cap and o.Packing), in memory,
// and returns their reports in that order: the same trials, so the columns
// differ by the schedule alone.
//
// The schedules are independent studies (each its own simulated clock and
// GPU), so they run at once, up to one per CPU; each is deterministic, and
// the reports come back in schedule order, so the answer does not depend on
// the number of cores. Warn and AfterRecord are then called from several
// goroutines.
func CompareSchedules(o Options, maxPAR int) ([]Report, error) {
	o.State, o.Resume = "", false
	var runs []Options
	for k := 1; k <= maxPAR; k++ {
		f := o
		f.Schedule, f.Workers, f.Packing = FixedSchedule, k, Packing{}
		runs = append(runs, f)
	}
	p := o
	p.Schedule = PackedSchedule
	p.Policy.EstimatePrune = false
	runs = append(runs, p)

	reps := make([]Report, len(runs))
	errs := make([]error, len(runs))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(runs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				res, err := Run(runs[j])
				if err != nil {
					errs[j] = err
					continue
				}
				reps[j] = Summarize(res.State, res.Planned)
			}
		}()
	}
	// The slowest first: PAR 1 runs every trial one after another.
	for j := range runs {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return reps, nil
}

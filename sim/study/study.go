// Package study runs a hyperparameter study on the simulated GPU: N trials
// drawn from a search space, PAR workers sharing one device, the BERT-family study'
// policies as switches, and a state file that lets a killed study resume.
// It is `memreplay trials`, and it answers the BERT-family study's question in minutes of
// simulation instead of days of crashes: with these policies and this
// allocator setting, how many trials complete per hour, how many are
// pruned or fail, and how does "reserved but unallocated" grow over the
// study (its field reports).
//
// # Trials
//
// A trial's hyperparameters come from a Space (space.go). Trial ids run
// 0..N-1 and a trial's Spec is a pure function of the study's seed and the
// id: the random sampler draws it from a generator seeded with (seed, id),
// the grid sampler takes position id of the grid shuffled once by the seed
// (as Optuna's GridSampler visits the grid in random order). Nothing depends
// on what ran before, which is what lets a resumed study continue the same
// sequence: a trial that finished before the kill is skipped, the others
// get exactly the Spec they would have had.
//
// Trials are handed to the workers engine (sim/workers) in id order, each
// as sim/trial's event stream. The engine runs PAR worker processes, each
// with its own CUDA context and caching allocator, on one simulated GPU and
// one clock; it reports each finished trial in simulated-time order, and
// the study appends it to the state file there.
//
// # Policies
//
// Each of the BERT-family study's fixes is a switch of Policy, so that each can be
// measured alone:
//
//   - PruneOnOOM: an OOM prunes the trial and the worker goes on (seed 002,
//     "Automatic OOM Handling with Trial Pruning"); off, the study stops at
//     the first OOM, as the unguarded script did.
//   - EmptyCache, DoubleClear: torch.cuda.empty_cache() after each trial,
//     or the BERT-family study's empty_cache; synchronize; gc.collect(); empty_cache
//     (seed 000, Fix 2).
//   - ResetEvery N: the worker's process exits and a fresh one (new context,
//     empty cache) starts every N trials (seed 000, Fix 3, which reset after
//     every 50 successful trials).
//   - EstimatePrune: before a trial runs, trial.Spec.Estimate's peak, plus
//     EstimateMargin for what the caching allocator adds (block and
//     segment rounding, split remainders; default 10%), is compared with
//     the worker's share of the GPU, capacity/PAR minus one CUDA context.
//     A trial that does not fit is recorded as pruned_estimate without
//     taking any worker time (seed 001, "Memory-Based Pruning"; seed 002's
//     estimate table). The estimate is the per-trial budget a user would
//     compute; it ignores that the other workers may be idle or small, so
//     it prunes some trials that would have run: that is its cost, and the
//     report shows it. EstimateBy "replay" uses sim/estimate's prediction
//     instead, the one `memreplay estimate` prints and the Python gate
//     admits trials by: the trial replayed alone through the allocator
//     (peak reserved, rounding and cache included) plus one CUDA context,
//     against capacity/PAR, with EstimateMargin (default 0 there) on top.
//   - RestartOnError, MaxFailures: a trial that hits a sticky device error
//     fails; the worker restarts with a fresh context, and gives up after
//     MaxFailures (default 3) failed trials in a row (seed 004, "Consecutive
//     Failure Detection"). Off, the worker stops at its first failure.
//
// # Where sticky errors come from
//
// The BERT-family study's chain is "OOM causes CUDA assert, assert corrupts context"
// (seed 000), and the corruption shows in the next trial on that process,
// at its first CUDA call (seed 004, "Scenario 3: Corruption Detected at
// Seed Setting"). OOMCorrupts P models it: when a trial is pruned for an
// OOM, with probability P the worker's context is marked corrupted, and the
// worker's next trial gets a sticky error (cudaErrorAssert) at its first
// event through workers.Options.Fault. The OOM trial itself stays
// pruned_oom, as Optuna recorded it. A reset of the worker between the two
// trials (ResetEvery) starts a fresh context, so the corruption is gone.
// FaultRate F adds errors with no cause the study can see (seed 004's
// "rare edge cases"): each trial, with probability F, gets a sticky error
// (cudaErrorIllegalAddress) at an event drawn uniformly from its events.
// Both draws use generators seeded with (seed, trial id), so they repeat
// on a rerun and on a resume.
//
// # State and resume
//
// The state file (state.go) is JSON Lines: a header with the options, one
// line per finished trial, fsynced as it is written. A killed study
// resumes from it: a torn last line is dropped with a warning, finished
// trial ids are skipped, the rest run in id order with the same Specs. A
// resume is a restart of the study's processes, as it was for the BERT-family study:
// the new run's workers start with fresh contexts and empty caches, and
// trials that were running at the kill run again from the start. Its clock
// continues from the state file's latest time, so trials per hour counts
// the lost work. So a resumed study's later trials can differ from an
// uninterrupted run's in what history made them (a cache fragmented by
// earlier trials, a corrupted context): that is the resume the BERT-family study had,
// not a defect of this one; a trial with no history (one worker, a fresh
// process per trial) repeats exactly. A header whose options differ from
// the run's is refused, naming each difference; only the number of trials
// may change, to extend a study.
package study

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// Outcome is how a trial ended.
type Outcome string

// The outcomes: the engine's three and the estimate's.
const (
	Completed      = Outcome(workers.Completed)
	PrunedOOM      = Outcome(workers.PrunedOOM)
	Failed         = Outcome(workers.Failed)
	PrunedEstimate = Outcome("pruned_estimate") // the pre-trial estimate said it cannot fit; never ran
)

// Samplers.
const (
	RandomSampler = "random"
	GridSampler   = "grid"
)

// DefaultEstimateMargin is Policy.EstimateMargin when 0, for the hand count.
const DefaultEstimateMargin = 0.10

// What Policy.EstimateBy predicts a trial's memory with.
const (
	EstimateByHand   = "hand"   // trial.Spec.Estimate's peak x (1 + margin), against capacity/PAR - context
	EstimateByReplay = "replay" // sim/estimate: peak reserved of the trial replayed alone + context, against capacity/PAR
)

// Policy is the BERT-family study's fixes, each a switch (package comment).
type Policy struct {
	PruneOnOOM     bool
	EmptyCache     bool
	DoubleClear    bool
	ResetEvery     int
	EstimatePrune  bool
	EstimateMargin float64 // 0 means DefaultEstimateMargin ("hand"), 0 ("replay")
	EstimateBy     string  // "" or EstimateByHand, EstimateByReplay
	RestartOnError bool
	MaxFailures    int     // 0 means 3
	OOMCorrupts    float64 // probability that an OOM corrupts the worker's context
	FaultRate      float64 // probability of a sticky error per trial
	// ResetKind is what ResetEvery's reset is: ResetRestart ("" too), the
	// worker's process exits and a fresh one starts; or ResetClear, the
	// the study's "GPU reset", which was the double clear in the same process
	// (seed 000, Fix 3: empty_cache, synchronize, gc.collect,
	// empty_cache), so a corrupted context survives it.
	ResetKind string
}

// Reset kinds.
const (
	ResetRestart = "restart"
	ResetClear   = "clear"
)

// Options are one study.
type Options struct {
	Space   Space
	Sampler string // RandomSampler (default) or GridSampler
	// Trials is the study's size. For the grid sampler 0 means the whole
	// grid, and more than the grid is an error.
	Trials  int
	Workers int // PAR; at least 1. Under the packed schedule: the most trials at once
	Seed    uint64
	// Capacity of the simulated GPU in bytes; ContextOverhead per process
	// (0: sim's default, 500 MiB).
	Capacity, ContextOverhead uint64
	// AllocConf is PYTORCH_CUDA_ALLOC_CONF for every worker.
	AllocConf string
	// AllocPolicy is every worker's allocator policy (allocator.NewPolicy);
	// "" is PyTorch's.
	AllocPolicy string
	Policy      Policy
	// Stagger starts worker i at i*Stagger.
	Stagger time.Duration
	// ComputeShare is workers.Compute.Share (0: 1, trials time-slice).
	ComputeShare float64
	// Gap is each worker's setup time between trials; StartupCost a fresh
	// process's start-up time (workers.Policy).
	Gap, StartupCost time.Duration
	// Schedule is FixedSchedule ("" too) or PackedSchedule; Packing
	// configures the latter.
	Schedule string
	Packing  Packing

	// State is the state file; "" keeps the study in memory only.
	State string
	// Resume continues the study in State (a missing file starts it).
	Resume bool
	// Warn receives warnings (a torn last line dropped); nil discards.
	Warn io.Writer
	// AfterRecord, if set, is called after each trial's line is written;
	// an error stops the study there (Run returns it). Tests use it to
	// kill a study mid-run.
	AfterRecord func(Record) error
}

// Result is a study's state after Run: every trial of every run so far.
type Result struct {
	State *State
	// Summary is the engine's account of this run alone.
	Summary workers.Summary
	// Planned is the number of trials the study has (after the grid cap).
	Planned int
}

// salts separate the generators drawn from (seed, trial id).
const (
	saltFault   = 0x6661756c74 // "fault"
	saltCorrupt = 0x636f7272   // "corr"
	saltGrid    = 0x67726964   // "grid"
)

// study is one Run's state.
type study struct {
	o        Options
	cfg      config.Config
	pol      allocator.Policy
	planned  int
	grid     []trial.Spec
	perm     []int
	st       *State
	w        *stateWriter
	done     map[int]bool
	next     int
	runIdx   int
	offsetUS int64
	err      error // a failure inside Next or Fault, returned by the next Done
	// per worker: a corrupted context waiting for its next trial, the
	// process the worker is on and its trials there (to know when the
	// engine resets it, which clears the corruption).
	corrupted    []int // trial id whose OOM corrupted the context, or -1
	proc         []int
	trialsInProc []int
	cause        map[int]string
	predicted    *estimates // EstimateByReplay's predictions, by spec
	resetEvery   int        // the engine's ResetEvery (the packed schedule sets 1)
}

// Run runs (or resumes) a study.
func Run(o Options) (*Result, error) {
	s, err := newStudy(o)
	if err != nil {
		return nil, err
	}
	defer s.w.close()
	res := &Result{State: s.st, Planned: s.planned}
	gpu := gpu.Options{Name: "simulated GPU", Capacity: o.Capacity, ContextOverhead: o.ContextOverhead,
		EventsCompleteImmediately: true}
	stagger := make([]time.Duration, o.Workers)
	for i := range stagger {
		stagger[i] = time.Duration(i) * o.Stagger
	}
	onOOM := workers.StopOnOOM
	if o.Policy.PruneOnOOM {
		onOOM = workers.PruneOnOOM
	}
	wo := workers.Options{
		GPU: gpu, Alloc: &s.cfg, AllocPolicy: s.pol, Workers: o.Workers, Stagger: stagger,
		Policy: workers.Policy{
			OnOOM: onOOM, EmptyCacheBetweenTrials: o.Policy.EmptyCache, DoubleClear: o.Policy.DoubleClear,
			ResetEvery: o.Policy.ResetEvery, RestartOnStickyError: o.Policy.RestartOnError,
			MaxConsecutiveFailures: o.Policy.MaxFailures, Gap: o.Gap, StartupCost: o.StartupCost,
			ResetByClear: o.Policy.ResetKind == ResetClear,
		},
		Compute: workers.Compute{Share: o.ComputeShare},
		Next:    s.nextTask,
		Done:    s.doneTask,
		Fault:   s.fault,
	}
	if o.Schedule == PackedSchedule {
		_, stop, err := s.packed(&wo)
		if err != nil {
			return res, err
		}
		defer stop()
		s.resetEvery = wo.Policy.ResetEvery
	}
	sum, err := workers.Run(wo)
	res.Summary = sum
	if err == nil {
		err = s.err
	}
	if err != nil {
		return res, err
	}
	end := RunEnd{Kind: "run_end", Run: s.runIdx, MakespanUS: s.offsetUS + sum.Makespan.Microseconds(),
		Restarts: sum.Restarts, GivenUp: sum.GivenUp, Stopped: sum.Stopped,
		PeakDeviceUsed: sum.PeakDeviceUsed, Capacity: sum.Capacity}
	if err := s.writeLine(end); err != nil {
		return res, err
	}
	s.st.Ends = append(s.st.Ends, end)
	return res, nil
}

func newStudy(o Options) (*study, error) {
	if o.Workers < 1 {
		return nil, fmt.Errorf("workers (PAR) %d: want at least 1", o.Workers)
	}
	if o.Capacity == 0 {
		return nil, errors.New("capacity: want the GPU's memory in bytes")
	}
	if err := o.Space.Validate(); err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	p := o.Policy
	switch {
	case p.OOMCorrupts < 0 || p.OOMCorrupts > 1:
		return nil, fmt.Errorf("oom-corrupts %v: want a probability in [0, 1]", p.OOMCorrupts)
	case p.FaultRate < 0 || p.FaultRate > 1:
		return nil, fmt.Errorf("fault-rate %v: want a probability in [0, 1]", p.FaultRate)
	case p.ResetEvery < 0:
		return nil, fmt.Errorf("reset-every %d: want 0 (never) or more", p.ResetEvery)
	case p.MaxFailures < 0:
		return nil, fmt.Errorf("max-failures %d: want 0 (default 3) or more", p.MaxFailures)
	case p.EstimateMargin < 0:
		return nil, fmt.Errorf("estimate margin %v: want 0 or more", p.EstimateMargin)
	case p.EstimateBy != "" && p.EstimateBy != EstimateByHand && p.EstimateBy != EstimateByReplay:
		return nil, fmt.Errorf("estimate by %q: want %s or %s", p.EstimateBy, EstimateByHand, EstimateByReplay)
	case o.ComputeShare < 0 || o.ComputeShare > 1:
		return nil, fmt.Errorf("compute share %v: want (0, 1]", o.ComputeShare)
	case p.ResetKind != "" && p.ResetKind != ResetRestart && p.ResetKind != ResetClear:
		return nil, fmt.Errorf("reset kind %q: want %s or %s", p.ResetKind, ResetRestart, ResetClear)
	case o.Schedule != "" && o.Schedule != FixedSchedule && o.Schedule != PackedSchedule:
		return nil, fmt.Errorf("schedule %q: want %s or %s", o.Schedule, FixedSchedule, PackedSchedule)
	case o.Schedule == PackedSchedule && p.EstimatePrune:
		return nil, fmt.Errorf("estimate-prune and the packed schedule exclude each other: packing prunes what cannot fit alone, and admits the rest by memory")
	case o.Packing.Predict != "" && o.Packing.Predict != AnalyticPredictor && o.Packing.Predict != ReplayPredictor && o.Packing.Predict != EstimatePredictor:
		return nil, fmt.Errorf("predict %q: want %s, %s or %s", o.Packing.Predict, ReplayPredictor, EstimatePredictor, AnalyticPredictor)
	case o.Packing.Margin < 0:
		return nil, fmt.Errorf("pack margin %v: want 0 or more", o.Packing.Margin)
	}
	cfg, err := config.Parse(o.AllocConf)
	if err != nil {
		return nil, fmt.Errorf("alloc-conf %q: %v", o.AllocConf, err)
	}
	pol, err := allocator.NewPolicy(o.AllocPolicy)
	if err != nil {
		return nil, err
	}
	s := &study{o: o, cfg: cfg, pol: pol, done: map[int]bool{}, cause: map[int]string{}}
	if p.ResetKind != ResetClear {
		s.resetEvery = p.ResetEvery // a clear keeps the process and its context
	}
	switch o.Sampler {
	case "", RandomSampler:
		if o.Trials < 1 {
			return nil, fmt.Errorf("trials %d: want at least 1", o.Trials)
		}
		s.planned = o.Trials
	case GridSampler:
		s.grid = o.Space.Grid()
		switch {
		case o.Trials == 0:
			s.planned = len(s.grid)
		case o.Trials > len(s.grid):
			return nil, fmt.Errorf("trials %d: the grid has only %d combinations", o.Trials, len(s.grid))
		case o.Trials < 0:
			return nil, fmt.Errorf("trials %d: want at least 1 (0: the whole grid)", o.Trials)
		default:
			s.planned = o.Trials
		}
		s.perm = rand.New(rand.NewPCG(o.Seed, saltGrid)).Perm(len(s.grid))
	default:
		return nil, fmt.Errorf("sampler %q: want random or grid", o.Sampler)
	}
	s.corrupted = make([]int, o.Workers)
	for i := range s.corrupted {
		s.corrupted[i] = -1
	}
	s.proc = make([]int, o.Workers)
	s.trialsInProc = make([]int, o.Workers)
	if err := s.openState(); err != nil {
		return nil, err
	}
	return s, nil
}

// SpecFor is trial id's Spec in a study with these options: a pure
// function of the seed, the sampler, the space and the id.
func (o Options) SpecFor(id int) trial.Spec {
	if o.Sampler == GridSampler {
		g := o.Space.Grid()
		perm := rand.New(rand.NewPCG(o.Seed, saltGrid)).Perm(len(g))
		return g[perm[id]]
	}
	return o.Space.Sample(rand.New(rand.NewPCG(o.Seed, uint64(id))))
}

func (s *study) specFor(id int) trial.Spec {
	if s.grid != nil {
		return s.grid[s.perm[id]]
	}
	return s.o.Space.Sample(rand.New(rand.NewPCG(s.o.Seed, uint64(id))))
}

// nextTask hands a worker the next trial that has not finished; trials the
// estimate prunes are recorded here, at no worker time.
func (s *study) nextTask(w int, now time.Duration) (workers.Task, bool) {
	for {
		id, sp, ok := s.nextSpec()
		if !ok {
			return workers.Task{}, false
		}
		if s.o.Policy.EstimatePrune {
			need, budget, err := s.estimate(sp)
			if err != nil {
				s.err = err
				return workers.Task{}, false
			}
			if need > budget {
				r := Record{Kind: "trial", ID: id, Label: sp.String(), Spec: specJSON(sp), Worker: -1,
					Outcome: PrunedEstimate, StartUS: s.offsetUS + now.Microseconds(), EndUS: s.offsetUS + now.Microseconds(),
					Error:         s.pruneMessage(need, budget),
					EstimateBytes: need, Run: s.runIdx}
				if err := s.record(r); err != nil {
					s.err = err
					return workers.Task{}, false
				}
				continue
			}
		}
		return workers.Task{ID: id, Label: sp.String(), Open: sp.Reader}, true
	}
}

// nextSpec takes the next trial not yet finished, while the study has no
// error and trials remain.
func (s *study) nextSpec() (int, trial.Spec, bool) {
	for s.err == nil && s.next < s.planned {
		id := s.next
		s.next++
		if !s.done[id] {
			return id, s.specFor(id), true
		}
	}
	return 0, trial.Spec{}, false
}

// context is what each trial's process costs the GPU (0: sim's default).
func (s *study) context() uint64 {
	if s.o.ContextOverhead == 0 {
		return gpu.DefaultContextOverhead
	}
	return s.o.ContextOverhead
}

// estimate is the pre-trial check: the prediction with the margin, and
// one worker's share of the GPU it must fit.
func (s *study) estimate(sp trial.Spec) (need, budget uint64, err error) {
	ctx := s.context()
	share := s.o.Capacity / uint64(s.o.Workers)
	m := s.o.Policy.EstimateMargin
	if s.o.Policy.EstimateBy == EstimateByReplay {
		// The prediction counts the context.
		if s.predicted == nil {
			s.predicted = &estimates{o: estimate.Options{Config: &s.cfg, Policy: s.pol, ContextOverhead: ctx}}
		}
		p, err := s.predicted.get(sp)
		if err != nil {
			return 0, 0, fmt.Errorf("estimate of %s: %w", sp, err)
		}
		return uint64(float64(p.NeedBytes) * (1 + m)), share, nil
	}
	if m == 0 {
		m = DefaultEstimateMargin
	}
	need = uint64(float64(sp.Estimate().PeakBytes) * (1 + m))
	if share > ctx {
		budget = share - ctx
	}
	return need, budget, nil
}

// pruneMessage is a pruned_estimate record's error.
func (s *study) pruneMessage(need, budget uint64) string {
	if s.o.Policy.EstimateBy == EstimateByReplay {
		return fmt.Sprintf("predicted %s (peak reserved + context) > %s per worker (capacity/%d)", gib(need), gib(budget), s.o.Workers)
	}
	return fmt.Sprintf("estimate %s with margin > %s per worker (capacity/%d - context)", gib(need), gib(budget), s.o.Workers)
}

// fault says whether a trial gets a sticky error, and where.
func (s *study) fault(w int, t workers.Task) *workers.Fault {
	if by := s.corrupted[w]; by >= 0 {
		s.corrupted[w] = -1
		s.cause[t.ID] = fmt.Sprintf("context corrupted by trial %d's OOM (oom-corrupts)", by)
		return &workers.Fault{AtEvent: 0, Name: "cudaErrorAssert"}
	}
	if s.o.Policy.FaultRate == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.o.Seed^saltFault, uint64(t.ID)))
	if rng.Float64() >= s.o.Policy.FaultRate {
		return nil
	}
	n, err := countEvents(t)
	if err != nil {
		s.err = err
		return nil
	}
	if n == 0 {
		return nil
	}
	s.cause[t.ID] = "random sticky error (fault-rate)"
	return &workers.Fault{AtEvent: rng.Int64N(n), Name: "cudaErrorIllegalAddress"}
}

// countEvents reads a trial once to place a random fault among its events;
// only faulted trials pay for it.
func countEvents(t workers.Task) (int64, error) {
	rd, err := t.Open()
	if err != nil {
		return 0, fmt.Errorf("trial %d (%s): %w", t.ID, t.Label, err)
	}
	defer rd.Close()
	var e trace.Event
	var n int64
	for {
		err := rd.Next(&e)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("trial %d (%s): %w", t.ID, t.Label, err)
		}
		n++
	}
}

// doneTask records a finished trial and applies the OOM-corrupts draw.
func (s *study) doneTask(r workers.TaskResult) error {
	if s.err != nil {
		return s.err
	}
	w := r.Worker
	id := r.Task.ID
	sp := s.specFor(id)
	rec := Record{Kind: "trial", ID: id, Label: r.Task.Label, Spec: specJSON(sp), Worker: w,
		Outcome: Outcome(r.Outcome), Error: r.Err,
		StartUS: s.offsetUS + r.Start.Microseconds(), EndUS: s.offsetUS + r.End.Microseconds(),
		Events: r.Events, PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved,
		ReservedUnallocated: r.ReservedUnallocated, Retries: r.Retries, OOMs: r.OOMs,
		DeviceTimeUS: r.DeviceTime.Microseconds(), Process: r.Process, Run: s.runIdx}
	if c := s.cause[id]; c != "" && r.Outcome == workers.Failed {
		rec.Error = c + ": " + rec.Error
	}
	delete(s.cause, id)
	if s.o.Policy.EstimatePrune {
		rec.EstimateBytes, _, _ = s.estimate(sp) // computed, and cached, when the trial was handed out
	}
	// Mirror the engine's reset rule (workers.Policy.ResetEvery counts the
	// trials a process ran that did not fail) to know whether the worker
	// keeps this context for its next trial.
	if r.Process != s.proc[w] {
		s.proc[w], s.trialsInProc[w] = r.Process, 0
	}
	if r.Outcome != workers.Failed {
		s.trialsInProc[w]++
	}
	reset := s.resetEvery > 0 && s.trialsInProc[w] >= s.resetEvery
	if r.Outcome == workers.PrunedOOM && s.o.Policy.OOMCorrupts > 0 && !reset {
		rng := rand.New(rand.NewPCG(s.o.Seed^saltCorrupt, uint64(id)))
		if rng.Float64() < s.o.Policy.OOMCorrupts {
			s.corrupted[w] = id
		}
	}
	if r.Outcome == workers.Failed {
		s.corrupted[w] = -1 // a fresh process, or a stopped worker
	}
	return s.record(rec)
}

// record writes a trial's line and notes it done.
func (s *study) record(r Record) error {
	if err := s.writeLine(r); err != nil {
		return err
	}
	s.done[r.ID] = true
	s.st.Records = append(s.st.Records, r)
	if s.o.AfterRecord != nil {
		return s.o.AfterRecord(r)
	}
	return nil
}

func (s *study) writeLine(v any) error {
	if s.w == nil {
		return nil
	}
	return s.w.write(v)
}

func gib(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

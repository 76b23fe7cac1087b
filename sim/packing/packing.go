// Package packing admits trials to one GPU by the memory they are predicted
// to need, instead of running a fixed number of them at once (PAR): a trial
// starts only when its predicted peak reserved, times a correction learned
// from the trials seen so far, fits in what the running trials leave of the
// GPU. Big trials then run alone and small ones several at once. It is
// `memreplay trials --schedule packed` and the packed row of `memreplay par`.
//
// # The budget
//
// Every running trial commits its need: one CUDA context (the process it runs
// in) plus Predict(spec) x ratio x (1 + margin), where ratio and margin are
// learned (below). A trial is admitted only if the commitments of the running
// trials plus its own stay within the GPU's capacity: the scheduler never
// over-commits, and Options.Admitted sees every admission with the figures
// that prove it. A trial runs in its own process, which exits when the trial
// ends (Policy sets workers.Policy.ResetEvery to 1): what a finished trial
// held, its cache and its context, goes back to the GPU at once, and a slot
// waiting for room holds nothing. That is how a launcher that starts one
// `python train.py` per trial behaves; a worker pool whose idle processes
// keep their caches could not promise the budget.
//
// A trial predicted not to fit even alone (Predict(spec) + context above
// the capacity, no learning applied) never runs: Options.Reject records it,
// as the BERT-family study's pre-trial estimate pruned such trials. A trial whose learned
// need is above the capacity but whose bare prediction fits runs alone,
// committing the whole GPU.
//
// # Order
//
// Trials come from Options.Source in the study's order. The scheduler looks
// at the first Window of them that have not started and admits the first
// that fits, so small trials go past a big one waiting for room. The oldest
// waiting trial may be passed over MaxPass times; after that nothing else is
// admitted until it fits, so a big trial waits for the GPU to drain and then
// runs, instead of starving behind a stream of small ones. With nothing
// running the oldest trial is always admitted: the run cannot stall.
//
// # What is learned
//
// Predict is the prediction of one trial's peak reserved bytes alone
// (Analytic: sim/trial's pre-trial estimate of peak live bytes; Replay: the
// trial model run alone on the simulated GPU). What a trial really reserves
// differs from the prediction by the allocator's rounding and fragmentation
// and by what the prediction leaves out. After each trial the scheduler
// keeps ratio = peak reserved / prediction, the largest seen per model (the
// spec's model name), and uses the largest of all models for a model not yet
// seen; before any trial has finished, a trial runs alone (a probe), unless
// Options.PriorRatio gives a ratio to start from. On top,
// a margin (Options.Margin, 5% by default) grows by OOMStep for every OOM
// and by RetryStep for every trial that needed an allocator retry (a
// cudaMalloc that failed and succeeded after the cache was released: the
// GPU was fuller than the budget said). So a prediction that proves short
// costs at most the trials in flight when it showed, and every later trial
// is admitted with the wider need.
package packing

import (
	"fmt"
	"time"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// Defaults of Options.
const (
	DefaultMargin    = 0.05
	DefaultOOMStep   = 0.10
	DefaultRetryStep = 0.02
	DefaultWindow    = 8
	DefaultMaxPass   = 8
)

// Item is one trial to schedule.
type Item struct {
	ID    int
	Label string
	Spec  trial.Spec // what Predict sees; Spec.Model.Name keys the learned ratio
	Open  func() (trace.Reader, error)
	// Predicted, when not 0, is the trial's prediction already made (a
	// measured solo run, a trace's recorded peak): Predict is not asked.
	Predicted uint64
}

// Options configure a Scheduler.
type Options struct {
	Capacity        uint64 // the GPU's memory
	ContextOverhead uint64 // per process; 0: gpu.DefaultContextOverhead
	Predict         Predictor
	// Margin is the starting safety margin over the learned need; OOMStep
	// and RetryStep what an OOM and a trial with retries add to it. 0:
	// the defaults; a negative value means 0.
	Margin, OOMStep, RetryStep float64
	// PriorRatio is the ratio used before any trial has finished; 0: a
	// trial of a model not seen yet runs alone until one has (a probe).
	// A predictor known to be exact (Replay) can say 1.
	PriorRatio float64
	// Window is how many waiting trials the scheduler looks at; MaxPass how
	// often the oldest may be passed over (package comment). 0: defaults.
	Window, MaxPass int
	// Source hands the next trial in order; false: none left.
	Source func() (Item, bool)
	// Reject, if set, receives each trial predicted not to fit even alone
	// (need: its prediction plus a context); it never runs.
	Reject func(it Item, need uint64, now time.Duration) error
	// Admitted, if set, sees every admission.
	Admitted func(a Admission)
}

// Admission is one trial's start: what it was committed, and the GPU's
// commitments with it. Committed <= Capacity always.
type Admission struct {
	ID        int
	At        time.Duration
	Predicted uint64 // Predict(spec)
	Need      uint64 // committed for it: context + learned need (the whole GPU when alone beyond it)
	Committed uint64 // all running trials' needs, this one's included
	Capacity  uint64
	Running   int  // trials running, this one included
	Alone     bool // admitted on an empty GPU although its learned need is above the capacity, or as a probe
	Passed    int  // waiting trials it went past
}

// Scheduler is the admission state of one run; its Hold, Next and Done are
// workers.Options' hooks.
type Scheduler struct {
	o       Options
	ctx     uint64
	pending []waiting
	drained bool
	chosen  map[int]waiting // worker -> trial admitted by Hold, taken by Next
	running map[int]uint64  // trial id -> committed need
	pred    map[int]waiting
	used    uint64 // sum of running
	passes  int    // times the oldest waiting trial was passed over
	learn   learner
	err     error
}

type waiting struct {
	it   Item
	pred uint64
}

// New makes a scheduler.
func New(o Options) (*Scheduler, error) {
	if o.ContextOverhead == 0 {
		o.ContextOverhead = gpu.DefaultContextOverhead
	}
	if o.Predict == nil {
		o.Predict = Analytic
	}
	def := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def(&o.Margin, DefaultMargin)
	def(&o.OOMStep, DefaultOOMStep)
	def(&o.RetryStep, DefaultRetryStep)
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxPass == 0 {
		o.MaxPass = DefaultMaxPass
	}
	switch {
	case o.Capacity <= o.ContextOverhead:
		return nil, fmt.Errorf("packing: capacity %d is not above one context (%d)", o.Capacity, o.ContextOverhead)
	case o.Source == nil:
		return nil, fmt.Errorf("packing: no Source")
	case o.Window < 1 || o.MaxPass < 0:
		return nil, fmt.Errorf("packing: window %d and max-pass %d: want at least 1 and 0", o.Window, o.MaxPass)
	}
	return &Scheduler{o: o, ctx: o.ContextOverhead, chosen: map[int]waiting{}, running: map[int]uint64{},
		pred: map[int]waiting{}, learn: newLearner(o.Margin, o.PriorRatio)}, nil
}

// Policy is p with what packing needs: every trial in its own process.
func Policy(p workers.Policy) workers.Policy {
	p.ResetEvery = 1
	return p
}

// Err is the first error of a Reject, or a broken invariant; the run's Done
// should return it (workers stops there).
func (s *Scheduler) Err() error { return s.err }

// Margin is the safety margin learned so far.
func (s *Scheduler) Margin() float64 { return s.learn.margin }

// fill tops the window up from Source, rejecting what cannot fit alone.
func (s *Scheduler) fill(now time.Duration) {
	for !s.drained && len(s.pending) < s.o.Window && s.err == nil {
		it, ok := s.o.Source()
		if !ok {
			s.drained = true
			return
		}
		p := it.Predicted
		if p == 0 {
			p = s.o.Predict(it.Spec)
		}
		if p+s.ctx > s.o.Capacity {
			if s.o.Reject != nil {
				s.err = s.o.Reject(it, p+s.ctx, now)
			}
			continue
		}
		s.pending = append(s.pending, waiting{it: it, pred: p})
	}
}

// need is what trial w would commit, and whether it must run alone.
func (s *Scheduler) need(w waiting) (uint64, bool) {
	ratio, known := s.learn.ratio(w.it.Spec.Model.Name)
	if !known {
		return s.o.Capacity, true // a probe: nothing learned yet
	}
	n := float64(w.pred)*ratio*(1+s.learn.margin) + float64(s.ctx)
	if n >= float64(s.o.Capacity) {
		return s.o.Capacity, true
	}
	return uint64(n), false
}

// Hold is workers.Options.Hold: it picks worker w's next trial, or parks w
// when none fits.
func (s *Scheduler) Hold(w int, now time.Duration) bool {
	if s.err != nil {
		return false // Next says no; the run winds down
	}
	s.fill(now)
	if len(s.pending) == 0 {
		return false
	}
	free := s.o.Capacity - s.used
	for i, c := range s.pending {
		if i > 0 && s.passes >= s.o.MaxPass {
			break // the oldest has waited enough: room is kept for it
		}
		n, alone := s.need(c)
		if alone && len(s.running) > 0 || n > free {
			continue
		}
		if i > 0 {
			s.passes++
		} else {
			s.passes = 0
		}
		s.pending = append(s.pending[:i], s.pending[i+1:]...)
		s.admit(w, c, n, alone, i, now)
		return false
	}
	if len(s.running) == 0 {
		// Unreachable by construction (an empty GPU admits the oldest);
		// kept so that a mistake shows as an error, not a stall.
		s.err = fmt.Errorf("packing: nothing running and no trial admitted at %v", now)
		return false
	}
	return true
}

func (s *Scheduler) admit(w int, c waiting, n uint64, alone bool, passed int, now time.Duration) {
	s.used += n
	s.running[c.it.ID] = n
	s.pred[c.it.ID] = c
	s.chosen[w] = c
	if s.used > s.o.Capacity && s.err == nil {
		s.err = fmt.Errorf("packing: trial %d admitted with %d bytes committed of %d", c.it.ID, s.used, s.o.Capacity)
	}
	if s.o.Admitted != nil {
		s.o.Admitted(Admission{ID: c.it.ID, At: now, Predicted: c.pred, Need: n, Committed: s.used,
			Capacity: s.o.Capacity, Running: len(s.running), Alone: alone, Passed: passed})
	}
}

// Next is workers.Options.Next: the trial Hold admitted for w.
func (s *Scheduler) Next(w int, _ time.Duration) (workers.Task, bool) {
	c, ok := s.chosen[w]
	if !ok {
		return workers.Task{}, false
	}
	delete(s.chosen, w)
	return workers.Task{ID: c.it.ID, Label: c.it.Label, Open: c.it.Open}, true
}

// Done must be called with every finished task (from workers.Options.Done):
// it releases the trial's commitment and learns from what it reserved.
func (s *Scheduler) Done(r workers.TaskResult) {
	n, ok := s.running[r.Task.ID]
	if !ok {
		return
	}
	c := s.pred[r.Task.ID]
	delete(s.running, r.Task.ID)
	delete(s.pred, r.Task.ID)
	s.used -= n
	s.learn.observe(c.it.Spec.Model.Name, c.pred, r, s.o.OOMStep, s.o.RetryStep)
}

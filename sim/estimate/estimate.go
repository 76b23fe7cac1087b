// Package estimate predicts one trial's GPU memory before it runs: its peak
// live bytes, its peak reserved bytes (what the caching allocator holds
// from the device, live plus cached), the CUDA context its process adds, and
// the margin by which the reserved peak exceeds the textbook estimate. It
// is `memreplay estimate`, the figure a memory gate admits a trial by
// (python/memreplay), and the prediction a scheduler packs trials with.
//
// # How
//
// From hyperparameters (Spec), the trial model (sim/trial) generates the
// allocation sequence of the trial and the replayer (sim/replay) runs it
// alone through the caching allocator on a simulated GPU: the prediction is
// what the allocator decided, rounding, splits, cached blocks and all, not a
// sum with a guessed margin. trial.Spec.Estimate, the hand count, comes
// along as Analytic, and Margin = PeakReserved/Analytic - 1 is what a
// margin on the hand count must be for this trial (the flat 10% of
// `trials --estimate-prune` is a guess at it; the PAR runs' solo replays
// measure it per trial the same way).
//
// A trial's memory is periodic once its first optimizer step has created
// the optimizer state: every later step allocates and frees the same sizes
// in the same order, so the caching allocator's state after step 2 repeats.
// Simulating min(steps, Steps) steps and one evaluation pass reaches the
// trial's peaks (TestShortRunMatchesFullTrial checks it on every built-in
// model). Dynamic padding breaks the period (each batch draws its length),
// and the cache fragments with the draws, so such a trial is simulated
// whole.
//
// From a recorded trace (Trace), the replay of the trace is the prediction
// of a rerun of the same trial: PeakLive and PeakReserved under the
// settings given, Margin = PeakReserved/PeakLive - 1 (no hand count exists
// for a trace).
package estimate

import (
	"errors"
	"fmt"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/trace"
)

// Steps is how many optimizer steps a Spec's prediction simulates (fewer
// when the trial has fewer): step 1 creates the optimizer state, step 2 is
// the first with everything live, step 3 shows the cache at its period.
const Steps = 3

// Options configure a prediction.
type Options struct {
	// Config is the allocator's settings (PYTORCH_CUDA_ALLOC_CONF); nil is
	// PyTorch's default, or the trace's own settings for a trace.
	Config *config.Config
	// Policy is the allocator's policy (allocator.NewPolicy); nil is
	// PyTorch's.
	Policy allocator.Policy
	// ContextOverhead is what the trial's process costs the GPU before
	// any allocation; 0 means gpu.DefaultContextOverhead.
	ContextOverhead uint64
}

// Prediction is one trial's memory.
type Prediction struct {
	Label  string `json:"label"`
	Source string `json:"source"` // "hyperparameters" or "trace"
	// PeakLiveBytes is the peak of the bytes handed to tensors (PyTorch's
	// allocated_bytes.all.peak: requests rounded to the allocator's 512).
	PeakLiveBytes uint64 `json:"peak_live_bytes"`
	// PeakReservedBytes is the peak of the bytes the allocator held from
	// the device (reserved_bytes.all.peak).
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// AnalyticLiveBytes is trial.Spec.Estimate's peak, the hand count;
	// 0 for a trace.
	AnalyticLiveBytes uint64 `json:"analytic_live_bytes,omitempty"`
	// Margin is PeakReserved over the hand count (over PeakLive for a
	// trace), minus 1.
	Margin float64 `json:"margin"`
	// ContextBytes is the CUDA context of the trial's process.
	ContextBytes uint64 `json:"context_bytes"`
	// NeedBytes is PeakReserved + ContextBytes: what the trial takes from
	// the GPU, the figure a gate admits it by.
	NeedBytes uint64 `json:"need_bytes"`
	// Retries and OOMs are the allocator's during the simulated run on an
	// unlimited device: 0 unless the trace recorded failures.
	Retries int64 `json:"retries"`
	// Events is how many allocator events were simulated, and
	// StepsSimulated how many optimizer steps (0 for a trace).
	Events         int64  `json:"events"`
	StepsSimulated int    `json:"steps_simulated,omitempty"`
	AllocConf      string `json:"alloc_conf"`
}

// Spec predicts the trial sp.
func Spec(sp trial.Spec, o Options) (Prediction, error) {
	if err := sp.Validate(); err != nil {
		return Prediction{}, err
	}
	short := sp
	if !sp.DynamicPadding {
		short = Shorten(sp)
	}
	r, err := short.Reader()
	if err != nil {
		return Prediction{}, err
	}
	p, err := run(r, sp.String(), o)
	if err != nil {
		return Prediction{}, err
	}
	p.Source = "hyperparameters"
	p.StepsSimulated = short.Steps
	if short.Steps == 0 {
		p.StepsSimulated = trial.DefaultSteps
	}
	p.AnalyticLiveBytes = sp.Estimate().PeakBytes
	p.Margin = ratio(p.PeakReservedBytes, p.AnalyticLiveBytes)
	return p, nil
}

// Shorten is the run Spec simulates for a trial without dynamic padding:
// at most Steps optimizer steps and one evaluation pass at the end, which
// reach the whole trial's peaks (package comment).
func Shorten(sp trial.Spec) trial.Spec {
	steps := sp.Steps
	if steps <= 0 {
		steps = trial.DefaultSteps
	}
	sp.Steps = min(steps, Steps)
	sp.EvalEvery = 0
	return sp
}

// Trace predicts a rerun of the recorded trial r (named name in errors).
func Trace(r trace.Reader, name string, o Options) (Prediction, error) {
	p, err := run(r, name, o)
	if err != nil {
		return Prediction{}, err
	}
	p.Source = "trace"
	p.Margin = ratio(p.PeakReservedBytes, p.PeakLiveBytes)
	return p, nil
}

func run(r trace.Reader, name string, o Options) (Prediction, error) {
	// An unlimited device: the prediction is what the trial needs, not
	// where a recorded capacity stopped it.
	res, err := replay.Run(r, replay.Options{Name: name, Config: o.Config, Policy: o.Policy, OOM: replay.OOMSkip, Capacity: replay.UnknownCapacity})
	if err != nil {
		return Prediction{}, err
	}
	if len(res.Devices) == 0 {
		return Prediction{}, fmt.Errorf("%s: no allocations to predict from", name)
	}
	if len(res.Devices) > 1 {
		return Prediction{}, errors.New(name + ": the trace uses several devices; a prediction is of one trial on one GPU")
	}
	d := res.Devices[0]
	ctx := o.ContextOverhead
	if ctx == 0 {
		ctx = gpu.DefaultContextOverhead
	}
	p := Prediction{
		Label:             name,
		PeakLiveBytes:     uint64(d.Stats.AllocatedBytes[0].Peak),
		PeakReservedBytes: uint64(d.Stats.ReservedBytes[0].Peak),
		ContextBytes:      ctx,
		Retries:           d.Stats.NumAllocRetries,
		Events:            res.Events,
		AllocConf:         res.Config.String(),
	}
	p.NeedBytes = p.PeakReservedBytes + ctx
	return p, nil
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a)/float64(b) - 1
}

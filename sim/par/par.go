// Package par answers the BERT-family study's question before the run instead of after
// 452 crashes: how many trials fit on this GPU at once (the parallelism,
// PAR), with which allocator settings.
//
// # The experiment
//
// For every allocator setting and every k = 1..MaxPAR, par runs Mixes random
// mixes through sim/workers: k worker processes on one simulated GPU (each
// with its own CUDA context and caching allocator, all sharing its physical
// memory), each worker running TrialsPerWorker trials drawn from the workload
// one after another, so that a worker's cache carries what earlier trials
// left in it, as the BERT-family study's Optuna workers did. Workers start at random
// offsets (uniform over [0, MaxStagger), worker 0 at 0; MaxStagger defaults
// to the mean duration of the worker's trials), since a study's workers are
// never in step. A worker whose trial runs out of memory prunes it and goes
// on (workers.PruneOnOOM), and one whose context cannot be created because
// the others hold the memory fails that trial and tries again with the next.
// A worker done with its trials while others are still in theirs goes on
// with filler trials (its next draws), so that all k stay busy to the end,
// as in a long study; fillers load the GPU but are not counted (run.go).
//
// Worker w of mix m draws its trials and offset from (Seed, m, w) alone: every
// setting runs the same trials at the same offsets, and PAR k+1's mix m is
// PAR k's with one more worker (common random numbers), so the difference
// between two rows is the settings' or the PARs', not the dice's. The mixes
// of one PAR are independent of each other. They run in parallel; the report
// is the same whatever the parallelism.
//
// # What a row says
//
// First every counted trial runs alone, in a fresh process on the empty GPU.
// One that does not fit even then (the BERT-family study's space draws bert-base at batch
// 64 and length 512 in fp32: 40 GiB by sim/trial's estimate) is pruned at
// every PAR: its OOM is the trial's, not sharing's, so it is counted apart
// ("too big") and left out of P(OOM); the BERT-family study's model-aware limits and
// pre-trial estimate are the cure for those. A mix "has an OOM" when a trial
// that fits alone was pruned by an OOM in it, or a worker's context could not
// be created. P(OOM) for PAR k is the fraction of the k's mixes that had one,
// with a one-sided Wilson upper bound at the chosen confidence c: the true
// probability that a mix of k workers hits such an OOM is below the bound
// with confidence c (wilson.go).
//
// The safe PAR at confidence c is the largest k such that, for every j <= k,
// the upper bound of P(OOM) for PAR j is below 1 - c. In words: with
// confidence c, fewer than 1 - c of the mixes at that PAR or any smaller one
// would see an OOM. With no OOM at all in M mixes the bound is
// z²/(M + z²), so the rule needs M > z²·c/(1-c) mixes before any PAR can
// qualify (15 at c = 0.9, 52 at c = 0.95); the report says so when M is too
// small.
//
// Throughput is completed trials per hour of simulated time in steady state:
// measured in the window in which all k workers work with warm caches (from
// the end of the last worker's first trial to the end of the last counted
// trial), each completed trial counting for the fraction of its run time
// inside the window, so that neither start offsets, nor cold caches, nor a
// ragged end count for or against a PAR (runMix). OOM-pruned trials are lost
// work; retries (the cudaFrees and synchronisations of a released cache), the
// time of every device call and failed context starts cost through the
// workers' clock; compute contention follows workers.Compute, whose Share is
// an assumption to state, not a measurement (Options.Share). Speedup is a
// PAR's throughput over PAR 1's, for the same setting.
//
// The naive estimate is what users compute by hand:
// floor(0.9 x capacity / (peak reserved of one trial alone + context)), with
// the median trial's peak reserved (what nvidia-smi shows for a typical trial)
// and with the largest one, over the trials that fit alone.
package par

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// Trial is one trial of the workload.
type Trial struct {
	Label string
	// Open returns a fresh reader of the trial's events. It must be safe to
	// call from several goroutines (mixes run in parallel).
	Open func() (trace.Reader, error)
	// Duration is the trial's run time alone, for the start offsets; 0
	// when unknown.
	Duration time.Duration
}

// Setting is one allocator setting to compare.
type Setting struct {
	Name   string // as the user wrote it (PYTORCH_CUDA_ALLOC_CONF syntax)
	Config config.Config
	// Policy is the allocator policy; nil: PyTorch's.
	Policy allocator.Policy
}

// Defaults of Options.
const (
	DefaultMaxPAR          = 5
	DefaultMixes           = 32
	DefaultTrialsPerWorker = 3
	DefaultConfidence      = 0.9
	// DefaultShare is the compute share one trial is assumed to use alone
	// (workers.Compute): a BERT-class fine-tuning step at the BERT-family study's batch
	// sizes leaves much of a 24 GiB card's compute idle (kernel launch
	// gaps, small GEMMs, the optimizer and data loading on the CPU side).
	// 0.5 is an assumption, not a measurement; measure one trial alone
	// and set Share.
	DefaultShare = 0.5
	// NaiveFraction is the 0.9 of the hand estimate.
	NaiveFraction = 0.9
)

// Options configure a PAR search.
type Options struct {
	Capacity        uint64        // device memory in bytes
	ContextOverhead uint64        // per process; 0: gpu.DefaultContextOverhead
	Costs           gpu.CostModel // device-call latencies; zero: gpu.DefaultCosts()
	Settings        []Setting     // at least one
	MaxPAR          int           // k = 1..MaxPAR; 0: DefaultMaxPAR
	Mixes           int           // per setting and k; 0: DefaultMixes
	TrialsPerWorker int           // 0: DefaultTrialsPerWorker
	Seed            uint64
	Confidence      float64 // in (0, 1); 0: DefaultConfidence
	// Sample draws one trial; it must depend on rng alone.
	Sample func(rng *rand.Rand) Trial
	// Source describes the workload in the report ("the study's space", files).
	Source string
	// Workload identifies the workload beyond Source (a hash of the space,
	// the trace files' sizes), for the shards' fingerprint: shards of two
	// different spaces saved under one name do not merge.
	Workload string
	Share    float64 // workers.Compute.Share; 0: DefaultShare
	// MaxStagger bounds the workers' start offsets; 0: the mean Duration
	// of each worker's trials.
	MaxStagger time.Duration
	// Policy is what workers do around trials (empty_cache, gaps...).
	// OnOOM is always prune and RestartOnStickyError always on: the
	// experiment counts OOMs, it does not stop at them.
	Policy workers.Policy
	// Packed adds the packed schedule's row (sim/packing; runPacked): each
	// mix's trials of all MaxPAR workers, admitted by their memory.
	Packed bool
	// Parallel is how many mixes run at once; 0: one per CPU.
	Parallel int
	// Progress, when set, is called after each mix (from one goroutine at
	// a time) with the number done and the total.
	Progress func(done, total int)
}

func (o *Options) defaults() error {
	if o.MaxPAR == 0 {
		o.MaxPAR = DefaultMaxPAR
	}
	if o.Mixes == 0 {
		o.Mixes = DefaultMixes
	}
	if o.TrialsPerWorker == 0 {
		o.TrialsPerWorker = DefaultTrialsPerWorker
	}
	if o.Confidence == 0 {
		o.Confidence = DefaultConfidence
	}
	if o.Share == 0 {
		o.Share = DefaultShare
	}
	if o.ContextOverhead == 0 {
		o.ContextOverhead = gpu.DefaultContextOverhead
	}
	switch {
	case o.Capacity == 0:
		return fmt.Errorf("par: capacity is 0")
	case o.ContextOverhead >= o.Capacity:
		return fmt.Errorf("par: context overhead %d is not below the capacity %d", o.ContextOverhead, o.Capacity)
	case len(o.Settings) == 0:
		return fmt.Errorf("par: no allocator setting")
	case o.MaxPAR < 1 || o.MaxPAR > 64:
		return fmt.Errorf("par: max PAR %d is outside 1..64", o.MaxPAR)
	case o.Mixes < 1:
		return fmt.Errorf("par: %d mixes; need at least 1", o.Mixes)
	case o.TrialsPerWorker < 1:
		return fmt.Errorf("par: %d trials per worker; need at least 1", o.TrialsPerWorker)
	case !(o.Confidence > 0 && o.Confidence < 1):
		return fmt.Errorf("par: confidence %v is outside (0, 1)", o.Confidence)
	case !(o.Share > 0 && o.Share <= 1):
		return fmt.Errorf("par: trial share %v is outside (0, 1]", o.Share)
	case o.MaxStagger < 0:
		return fmt.Errorf("par: negative max stagger")
	case o.Sample == nil:
		return fmt.Errorf("par: no workload (Options.Sample)")
	}
	return nil
}

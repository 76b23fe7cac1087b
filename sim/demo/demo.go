// Package demo is the built-in workload of `memreplay demo`, the
// one-second first look: a sequence of BERT-base-shaped fine-tuning trials
// with different batch sizes and sequence lengths, run one after another in
// one process on a simulated 24 GiB GPU, as the hyperparameter study in the
// seeds did. Each trial allocates its weights, gradients and AdamW state,
// then runs training steps whose activations and attention scores depend on
// the trial's shape, and frees everything at the end; the cache is kept
// between trials unless EmptyCacheBetweenTrials is set. Changing shapes
// from trial to trial is what strands cached memory in split segments
// ("reserved but unallocated"), which expandable segments avoid.
//
// The sizes follow a PyTorch step's requests in order and size class but are
// a sketch, not a measured trace. The calibrated trial model is sim/trial
// (docs/trial-model.md), which `memreplay trials` and `memreplay par` run
// through sim/workers; the demo stays separate because it is small enough
// to read in one sitting and runs in a second.
package demo

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// Options shape one demo run.
type Options struct {
	Capacity                uint64 // device bytes (24 GiB in the seeds)
	Trials                  int
	StepsPerTrial           int
	Seed                    uint64
	EmptyCacheBetweenTrials bool
}

// DefaultOptions is the run `memreplay demo` does.
func DefaultOptions() Options {
	return Options{Capacity: 24 << 30, Trials: 24, StepsPerTrial: 3, Seed: 1}
}

// Result is what one run under one allocator setting produced.
type Result struct {
	Conf          string
	TrialsRun     int
	TrialsOOM     int // trials pruned by an out-of-memory error
	Stats         allocator.Stats
	PeakReserved  uint64
	PeakAllocated uint64
	// UnallocatedAtOOM is "reserved by PyTorch but unallocated" in the first
	// OOM's message: cached memory the failing request could not use.
	UnallocatedAtOOM   uint64
	FirstOOM           string // the first OOM message, if any
	DeviceTime         time.Duration
	DeviceCalls        uint64
	ReservedAfterTrial []uint64
}

// Run runs the workload under the settings string conf.
func Run(conf string, o Options) (Result, error) {
	res := Result{Conf: conf}
	cfg, err := config.Parse(conf)
	if err != nil {
		return res, err
	}
	card, err := gpu.New(gpu.Options{Name: "simulated 24 GiB GPU", Capacity: o.Capacity, EventsCompleteImmediately: true})
	if err != nil {
		return res, err
	}
	proc, err := card.NewProcess()
	if err != nil {
		return res, err
	}
	a, err := allocator.New(proc, cfg)
	if err != nil {
		return res, err
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	batches := []uint64{8, 16, 24, 32}
	seqs := []uint64{128, 256, 384, 512}
	for t := 0; t < o.Trials; t++ {
		tr := trial{a: a, batch: batches[r.IntN(len(batches))], seq: seqs[r.IntN(len(seqs))]}
		err := tr.run(o.StepsPerTrial)
		res.TrialsRun++
		var oom *allocator.OutOfMemoryError
		if errors.As(err, &oom) {
			res.TrialsOOM++
			if res.FirstOOM == "" {
				res.FirstOOM = err.Error()
				res.UnallocatedAtOOM = oom.Reserved - oom.Allocated
			}
		} else if err != nil {
			return res, err
		}
		if err := tr.freeAll(); err != nil {
			return res, err
		}
		st := a.Stats()
		res.ReservedAfterTrial = append(res.ReservedAfterTrial, uint64(st.ReservedBytes[0].Current))
		if o.EmptyCacheBetweenTrials {
			if err := a.EmptyCache(); err != nil {
				return res, err
			}
		}
	}
	res.Stats = a.Stats()
	res.PeakReserved = uint64(res.Stats.ReservedBytes[0].Peak)
	res.PeakAllocated = uint64(res.Stats.AllocatedBytes[0].Peak)
	c := proc.Counters()
	res.DeviceTime = c.Total.Time
	res.DeviceCalls = c.Total.Calls
	return res, nil
}

// BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522.
const (
	layers = 12
	hidden = 768
	heads  = 12
	ffn    = 3072
	vocab  = 30522
	fp32   = 4
)

type trial struct {
	a          *allocator.Allocator
	batch, seq uint64
	live       []*allocator.Block
}

func (t *trial) malloc(size uint64) (*allocator.Block, error) {
	b, err := t.a.Malloc(size, 0)
	if err != nil {
		return nil, err
	}
	t.live = append(t.live, b)
	return b, nil
}

func (t *trial) free(b *allocator.Block) error {
	for i, l := range t.live {
		if l == b {
			t.live[i] = t.live[len(t.live)-1]
			t.live = t.live[:len(t.live)-1]
			return t.a.Free(b)
		}
	}
	return nil
}

func (t *trial) freeAll() error {
	for len(t.live) > 0 {
		if err := t.free(t.live[len(t.live)-1]); err != nil {
			return err
		}
	}
	return nil
}

// paramSizes lists one copy of the model's parameter tensors.
func paramSizes() []uint64 {
	s := []uint64{vocab * hidden * fp32, 512 * hidden * fp32, 2 * hidden * fp32}
	for l := 0; l < layers; l++ {
		s = append(s,
			hidden*hidden*fp32, hidden*hidden*fp32, hidden*hidden*fp32, hidden*hidden*fp32, // q k v o
			4*hidden*fp32, hidden*fp32, 2*hidden*fp32, // biases, layer norm
			hidden*ffn*fp32, ffn*fp32, ffn*hidden*fp32, hidden*fp32, 2*hidden*fp32)
	}
	return append(s, hidden*hidden*fp32, hidden*fp32, 2*hidden*fp32)
}

func (t *trial) run(steps int) error {
	params := paramSizes()
	for _, s := range params { // weights
		if _, err := t.malloc(s); err != nil {
			return err
		}
	}
	tok := t.batch * t.seq
	for step := 0; step < steps; step++ {
		var acts []*allocator.Block
		keep := func(size uint64) error {
			b, err := t.malloc(size)
			if err == nil {
				acts = append(acts, b)
			}
			return err
		}
		if err := keep(tok * hidden * fp32); err != nil { // embeddings
			return err
		}
		for l := 0; l < layers; l++ {
			for _, s := range []uint64{
				3 * tok * hidden * fp32,                // qkv
				t.batch * heads * t.seq * t.seq * fp32, // attention scores
				t.batch * heads * t.seq * t.seq * fp32, // softmax
				tok * hidden * fp32,                    // context
				tok * ffn * fp32,                       // FFN up
				tok * ffn * fp32,                       // GELU
				tok * hidden * fp32,                    // FFN down + residual
			} {
				if err := keep(s); err != nil {
					return err
				}
			}
		}
		// Backward: gradients appear on the first step and stay; the
		// activations go in reverse order with a temporary per layer.
		if step == 0 {
			for _, s := range params {
				if _, err := t.malloc(s); err != nil {
					return err
				}
			}
		}
		for i := len(acts) - 1; i >= 0; i-- {
			if i%7 == 0 {
				tmp, err := t.malloc(tok * ffn * fp32)
				if err != nil {
					return err
				}
				if err := t.free(tmp); err != nil {
					return err
				}
			}
			if err := t.free(acts[i]); err != nil {
				return err
			}
		}
		if step == 0 { // AdamW exp_avg and exp_avg_sq, created lazily
			for _, s := range append(params, params...) {
				if _, err := t.malloc(s); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

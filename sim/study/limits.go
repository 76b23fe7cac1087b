package study

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/packing"
	"github.com/memreplay/memreplay/sim/trial"
)

// Model-aware limits, computed instead of written by hand (the BERT-family study'
// "heavy models draw batch 8-16"): for a target PAR k, the largest batch and
// sequence length each model may draw so that k trials of the largest
// allowed configuration, each with its context, fit on the card at their
// peaks at once. That worst case (every trial at its peak at the same
// moment, every one the biggest allowed) leaves no room for an OOM from
// sharing whatever the mix, which is what makes the promise checkable:
// `memreplay par --empty-cache` on the emitted space finds PAR k safe. The
// clear between trials is part of the promise: a worker that keeps its
// cache starts a trial with the last one's segments, which can hold more
// than the new trial's own peak once they fragment (on the BERT-family
// space, 3 of 32 mixes at PAR 2 without it).
//
// Peaks come from the trial model run alone on the card (packing.Replay),
// not from the analytic estimate, which runs up to 2.4 times short of what
// a trial reserves. The grid varies batch and sequence length over the
// model's choices; the other dimensions take their first choice, and the
// gradient accumulation its largest (more micro-batches draw more padded
// lengths and fragment the cache more). A model whose batch is cut keeps
// its effective batch through accumulation: its accumulation choices are
// the space's, and each times ceil(largest batch / allowed batch).

// ConfigPeak is one model x batch x sequence length alone on the card.
type ConfigPeak struct {
	Model        string `json:"model"`
	Batch        int    `json:"batch"`
	SeqLen       int    `json:"seq_len"`
	GradAccum    int    `json:"grad_accum"`
	PeakReserved uint64 `json:"peak_reserved"` // the card's capacity when it does not fit alone
	Fits         bool   `json:"fits_alone"`
}

// ModelLimit is one model's limit at the target PAR.
type ModelLimit struct {
	Model string `json:"model"`
	// Allowed is false when not even the smallest configuration fits k
	// times: the emitted space leaves the model out.
	Allowed      bool   `json:"allowed"`
	MaxBatch     int    `json:"max_batch"`
	MaxSeqLen    int    `json:"max_seq_len"`
	GradAccum    []int  `json:"grad_accum"`
	PeakReserved uint64 `json:"peak_reserved"` // of the largest allowed configuration
}

// Limits is the answer for one target PAR.
type Limits struct {
	PAR             int    `json:"par"`
	Capacity        uint64 `json:"capacity"`
	ContextOverhead uint64 `json:"context_overhead"`
	// PerTrial is what one of k trials may reserve: capacity/k - context.
	PerTrial uint64       `json:"per_trial"`
	Grid     []ConfigPeak `json:"grid"`
	Models   []ModelLimit `json:"models"`
	// Space is sp with the limits as one override per allowed model.
	Space Space `json:"space"`
}

// ModelLimits computes the grid and the limits of space sp for PAR k on a
// card of capacity bytes (ctx per context; 0: sim's default) with
// allocator setting cfg and policy pol (nil: PyTorch's). parallel bounds the replays run at once (0: one
// per CPU).
func ModelLimits(sp Space, capacity, ctx uint64, cfg config.Config, pol allocator.Policy, k, parallel int) (*Limits, error) {
	if err := sp.Validate(); err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	if ctx == 0 {
		ctx = gpu.DefaultContextOverhead
	}
	if k < 1 || capacity/uint64(k) <= ctx {
		return nil, fmt.Errorf("limits for PAR %d: a %d-byte card leaves no room per trial beside its context", k, capacity)
	}
	l := &Limits{PAR: k, Capacity: capacity, ContextOverhead: ctx, PerTrial: capacity/uint64(k) - ctx}
	peak := peaks(packing.Replay(cfg, pol, capacity, ctx), parallel)
	out := sp
	out.Name = fmt.Sprintf("%s-par%d", cmp.Or(sp.Name, "space"), k)
	out.Models, out.Overrides = nil, nil
	for _, m := range sp.Models {
		c := sp.ChoicesFor(m)
		bs, ss := sorted(c.BatchSizes), sorted(c.SeqLens)
		spec := func(b, s, ga int) trial.Spec {
			return trial.Spec{Model: m, Batch: b, SeqLen: s, GradAccum: ga, Precision: c.Precisions[0],
				Optimizer: c.Optimizers[0], GradientCheckpointing: c.Checkpointing[0],
				Attention: attentionFor(m, c.Attention[0]), DynamicPadding: c.DynamicPadding[0],
				Steps: sp.Steps, EvalEvery: sp.EvalEvery, EvalBatches: sp.EvalBatches}
		}
		ga := slices.Max(c.GradAccum)
		var specs []trial.Spec
		for _, b := range bs {
			for _, s := range ss {
				specs = append(specs, spec(b, s, ga))
			}
		}
		got := peak(specs)
		fits := map[[2]int]bool{}
		for i, p := range got {
			sp := specs[i]
			ok := p < capacity
			l.Grid = append(l.Grid, ConfigPeak{Model: m.Name, Batch: sp.Batch, SeqLen: sp.SeqLen, GradAccum: ga, PeakReserved: p, Fits: ok})
			fits[[2]int{sp.Batch, sp.SeqLen}] = ok && p <= l.PerTrial
		}
		// Candidates: corners (B, S) whose whole rectangle fits, largest
		// tokens first, longer sequences first on a tie.
		type corner struct{ b, s int }
		var cands []corner
		for _, b := range bs {
			for _, s := range ss {
				all := true
				for _, b2 := range bs {
					for _, s2 := range ss {
						if b2 <= b && s2 <= s && !fits[[2]int{b2, s2}] {
							all = false
						}
					}
				}
				if all {
					cands = append(cands, corner{b, s})
				}
			}
		}
		slices.SortFunc(cands, func(x, y corner) int {
			if d := cmp.Compare(y.b*y.s, x.b*x.s); d != 0 {
				return d
			}
			return cmp.Compare(y.s, x.s)
		})
		lim := ModelLimit{Model: m.Name}
		for _, cn := range cands {
			mult := (bs[len(bs)-1] + cn.b - 1) / cn.b
			gas := scaledAccum(c.GradAccum, mult)
			p := got[slices.Index(bs, cn.b)*len(ss)+slices.Index(ss, cn.s)]
			if top := slices.Max(gas); top != ga {
				// More micro-batches: check the corner again with them.
				p = peak([]trial.Spec{spec(cn.b, cn.s, top)})[0]
				if p > l.PerTrial {
					continue
				}
			}
			lim = ModelLimit{Model: m.Name, Allowed: true, MaxBatch: cn.b, MaxSeqLen: cn.s, GradAccum: gas, PeakReserved: p}
			break
		}
		l.Models = append(l.Models, lim)
		if !lim.Allowed {
			continue
		}
		out.Models = append(out.Models, m)
		var oc Choices
		oc.BatchSizes = upTo(bs, lim.MaxBatch)
		oc.SeqLens = upTo(ss, lim.MaxSeqLen)
		oc.GradAccum = lim.GradAccum
		out.Overrides = append(out.Overrides, Override{Name: fmt.Sprintf("par %d limit", k), Match: []string{m.Name}, Choices: oc})
	}
	if len(out.Models) == 0 {
		return l, fmt.Errorf("limits for PAR %d: no model of the space fits %d times on the card, even at its smallest batch and length", k, k)
	}
	// First match wins and matching is by substring: a longer name first,
	// so that xlm-roberta-base's limit is not roberta-base's.
	slices.SortStableFunc(out.Overrides, func(a, b Override) int { return cmp.Compare(len(b.Match[0]), len(a.Match[0])) })
	l.Space = out
	return l, nil
}

// peaks returns a function that predicts many specs at once, on up to
// parallel goroutines, in the specs' order.
func peaks(pred packing.Predictor, parallel int) func([]trial.Spec) []uint64 {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	return func(specs []trial.Spec) []uint64 {
		out := make([]uint64, len(specs))
		jobs := make(chan int)
		var wg sync.WaitGroup
		for g := 0; g < min(parallel, len(specs)); g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					out[j] = pred(specs[j])
				}
			}()
		}
		for j := range specs {
			jobs <- j
		}
		close(jobs)
		wg.Wait()
		return out
	}
}

func sorted(v []int) []int {
	s := slices.Clone(v)
	slices.Sort(s)
	return slices.Compact(s)
}

func upTo(v []int, top int) []int {
	var out []int
	for _, x := range v {
		if x <= top {
			out = append(out, x)
		}
	}
	return out
}

// scaledAccum is the accumulation choices that keep the effective batch
// when the batch is cut by mult: the space's own, and each times mult.
func scaledAccum(ga []int, mult int) []int {
	out := slices.Clone(ga)
	if mult > 1 {
		for _, g := range ga {
			out = append(out, g*mult)
		}
	}
	return sorted(out)
}

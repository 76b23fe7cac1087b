package study

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/memreplay/memreplay/sim/trial"
)

// Space is an HPO search space over trial.Spec. A draw picks a model first,
// then every other dimension from the choices that model is allowed: the
// Choices of the first Override whose Match names the model replace the
// defaults dimension by dimension (an empty list keeps the default). That is
// how the BERT-family study's authors wrote their model-aware limits: a heavy model does not draw a
// batch size of 48 and get rejected, it draws from [8, 12, 16] (seed 002,
// scripts/tune_max.py lines 164-192), so the sampling distribution, not just
// its support, follows the BERT-family study.
//
// Learning rate, dropout, weight decay and the like are left out: they do
// not change a single allocation.
type Space struct {
	// Name labels the space in reports and in the state file's header.
	Name string
	// Models to choose from, uniformly. Presets (trial.Models) or custom
	// shapes.
	Models []trial.Model
	// Default choices for every model.
	Choices Choices
	// Overrides are the model-aware constraints, first match wins.
	Overrides []Override
	// MaxEffectiveBatch, if > 0, rejects combinations with
	// Batch*GradAccum above it (seed 002's "max effective batch").
	// Sample redraws batch and accumulation until one passes.
	MaxEffectiveBatch int
	// Steps, EvalEvery and EvalBatches are copied into every Spec
	// (0: sim/trial's defaults).
	Steps, EvalEvery, EvalBatches int
}

// Choices are the values one dimension may take.
type Choices struct {
	BatchSizes    []int
	SeqLens       []int
	GradAccum     []int
	Precisions    []trial.Precision
	Optimizers    []string
	Checkpointing []bool
	// Attention is "eager", "sdpa" or "manual"; sdpa means Hugging Face's
	// default selection: SDPA where the model has it, eager for DeBERTa
	// (which has only its own attention, itself written by hand).
	Attention []string
	// DynamicPadding: pad each batch to its longest sequence
	// (DataCollatorWithPadding) or, false, to the sequence length.
	DynamicPadding []bool
	// KeepGrads and Compile are sim/trial's Spec switches of the same
	// names; empty means [false]. A list of one value draws nothing, so a
	// space without them samples exactly as before they existed.
	KeepGrads []bool
	Compile   []bool
}

// orFalse is a switch's choices, [false] when none are given.
func orFalse(v []bool) []bool {
	if len(v) == 0 {
		return []bool{false}
	}
	return v
}

// pickSwitch draws from a switch's choices only when there is a choice.
func pickSwitch(rng *rand.Rand, v []bool) bool {
	v = orFalse(v)
	if len(v) == 1 {
		return v[0]
	}
	return pick(rng, v)
}

// Override replaces choices for the models it matches.
type Override struct {
	// Name says what the rule is ("heavy"), for errors and reports.
	Name string
	// Match holds substrings of model names, as the BERT-family study's heavy-model test
	// `any(k in model_name for k in ["-large", "large", "xlm-roberta"])`.
	Match []string
	// Choices replace the defaults where non-empty.
	Choices Choices
}

// BERTFamilySpace is the BERT-family study on a 24 GiB card that this
// project started from: a 5000-trial Optuna search whose field reports
// ("CUDA Out of Memory (OOM) Fix for HPO", scripts/tune_max.py) give its
// space:
//
//   - models: the 7 of MODEL_CHOICES ("Model choices: 7"): bert-base,
//     bert-large, roberta-base, roberta-large, deberta-v3-base,
//     deberta-v3-large, xlm-roberta-base;
//   - every model (lines 164-192, "Base models"): tok.max_length 128..512
//     step 32, train.batch_size [8 12 16 24 32 48 64], train.grad_accum
//     [1 2 3 4 6 8];
//   - heavy models (lines 239/294: name contains "-large", "large" or
//     "xlm-roberta"): max_length 128..384 step 32, batch [8 12 16],
//     grad_accum [1 2 3 4].
//
// The reports never state the precision, optimizer, attention or padding; the
// space takes the transformers Trainer's defaults of their time (2025): fp32
// (no --fp16), AdamW, SDPA attention where the model has it (the default
// since transformers 4.41), dynamic padding (DataCollatorWithPadding, the
// Trainer's collator when it is given a tokenizer), and no gradient
// checkpointing (the reports mention it only as a "solution" to try). Steps
// are left to sim/trial's default: the study trained 100 epochs with early
// stopping, which no simulation needs to repeat to see a trial's peak.
// Unconstrained() gives the space before the fix (the same lists for all).
func BERTFamilySpace() Space {
	var models []trial.Model
	for _, n := range []string{"bert-base", "bert-large", "roberta-base", "roberta-large",
		"deberta-v3-base", "deberta-v3-large", "xlm-roberta-base"} {
		m, err := trial.LookupModel(n)
		if err != nil {
			panic(fmt.Sprintf("study: sim/trial lost a preset the BERT-family study uses: %v", err))
		}
		models = append(models, m)
	}
	return Space{
		Name:   "bert-family",
		Models: models,
		Choices: Choices{
			BatchSizes:     []int{8, 12, 16, 24, 32, 48, 64},
			SeqLens:        steps(128, 512, 32),
			GradAccum:      []int{1, 2, 3, 4, 6, 8},
			Precisions:     []trial.Precision{trial.FP32},
			Optimizers:     []string{"adamw"},
			Checkpointing:  []bool{false},
			Attention:      []string{trial.SDPA},
			DynamicPadding: []bool{true},
		},
		Overrides: []Override{{
			Name:  "heavy",
			Match: []string{"-large", "large", "xlm-roberta"},
			Choices: Choices{
				BatchSizes: []int{8, 12, 16},
				SeqLens:    steps(128, 384, 32),
				GradAccum:  []int{1, 2, 3, 4},
			},
		}},
	}
}

// SeedsSpace is BERTFamilySpace.
//
// Deprecated: use BERTFamilySpace.
func SeedsSpace() Space { return BERTFamilySpace() }

// Unconstrained is s without its model-aware limits: every model draws
// from the default choices (the BERT-family study's space before its OOM fix).
func (s Space) Unconstrained() Space {
	s.Overrides = nil
	s.MaxEffectiveBatch = 0
	if s.Name != "" {
		s.Name += "-unconstrained"
	}
	return s
}

func steps(from, to, by int) []int {
	var v []int
	for x := from; x <= to; x += by {
		v = append(v, x)
	}
	return v
}

// ChoicesFor is what model m may draw: the defaults with the first matching
// override's non-empty lists in their place.
func (s Space) ChoicesFor(m trial.Model) Choices {
	c := s.Choices
	for _, o := range s.Overrides {
		if !o.matches(m.Name) {
			continue
		}
		oc := o.Choices
		replaceIfSet(&c.BatchSizes, oc.BatchSizes)
		replaceIfSet(&c.SeqLens, oc.SeqLens)
		replaceIfSet(&c.GradAccum, oc.GradAccum)
		replaceIfSet(&c.Precisions, oc.Precisions)
		replaceIfSet(&c.Optimizers, oc.Optimizers)
		replaceIfSet(&c.Checkpointing, oc.Checkpointing)
		replaceIfSet(&c.Attention, oc.Attention)
		replaceIfSet(&c.DynamicPadding, oc.DynamicPadding)
		replaceIfSet(&c.KeepGrads, oc.KeepGrads)
		replaceIfSet(&c.Compile, oc.Compile)
		break
	}
	return c
}

// replaceIfSet puts an override's list in place of the default's when the
// override gives one.
func replaceIfSet[T any](dst *[]T, src []T) {
	if len(src) > 0 {
		*dst = src
	}
}

func (o Override) matches(name string) bool {
	for _, k := range o.Match {
		if strings.Contains(name, k) {
			return true
		}
	}
	return false
}

// Sample is one random draw honouring the constraints. It consumes a fixed
// pattern of draws from rng for a given space, so a study that seeds rng
// from (study seed, trial id) gets the same Spec for the same trial id
// whatever ran before: that is what makes a resumed study continue the
// same sequence. The Spec's Seed is drawn from rng too. The space must be
// valid (Validate), or Sample panics on an empty list.
func (s Space) Sample(rng *rand.Rand) trial.Spec {
	m := s.Models[rng.IntN(len(s.Models))]
	c := s.ChoicesFor(m)
	sp := trial.Spec{
		Model:       m,
		SeqLen:      pick(rng, c.SeqLens),
		Precision:   pick(rng, c.Precisions),
		Optimizer:   pick(rng, c.Optimizers),
		Steps:       s.Steps,
		EvalEvery:   s.EvalEvery,
		EvalBatches: s.EvalBatches,
	}
	sp.GradientCheckpointing = pick(rng, c.Checkpointing)
	sp.Attention = attentionFor(m, pick(rng, c.Attention))
	sp.DynamicPadding = pick(rng, c.DynamicPadding)
	sp.KeepGrads = pickSwitch(rng, c.KeepGrads)
	sp.Compile = pickSwitch(rng, c.Compile)
	// Batch and accumulation are redrawn together until the effective batch
	// fits; Validate made sure some pair does, and the smallest pair is
	// taken after many misses so that Sample always ends.
	for try := 0; ; try++ {
		sp.Batch, sp.GradAccum = pick(rng, c.BatchSizes), pick(rng, c.GradAccum)
		if s.MaxEffectiveBatch <= 0 || sp.Batch*sp.GradAccum <= s.MaxEffectiveBatch {
			break
		}
		if try == 64 {
			sp.Batch, sp.GradAccum = slices.Min(c.BatchSizes), slices.Min(c.GradAccum)
			break
		}
	}
	sp.Seed = rng.Uint64()
	return sp
}

// attentionFor resolves sdpa to eager for a model that has only eager
// attention, as Hugging Face's default selection does, and manual too:
// DeBERTa's own attention is the hand-written one.
func attentionFor(m trial.Model, a string) string {
	if (a == trial.SDPA || a == trial.Manual) && m.Arch == trial.DeBERTa {
		return trial.Eager
	}
	return a
}

func pick[T any](rng *rand.Rand, v []T) T { return v[rng.IntN(len(v))] }

// Grid is every combination that passes the constraints, in a fixed order:
// models in the space's order, then batch size, sequence length,
// accumulation, precision, optimizer, checkpointing, attention, padding,
// keep-grads and compile,
// each in its list's order. The Spec's Seed is its index in the grid, so a grid study is
// reproducible without a seed.
func (s Space) Grid() []trial.Spec {
	var out []trial.Spec
	for _, m := range s.Models {
		c := s.ChoicesFor(m)
		for _, b := range c.BatchSizes {
			for _, l := range c.SeqLens {
				for _, a := range c.GradAccum {
					if s.MaxEffectiveBatch > 0 && b*a > s.MaxEffectiveBatch {
						continue
					}
					for _, p := range c.Precisions {
						for _, o := range c.Optimizers {
							for _, ck := range c.Checkpointing {
								for _, at := range c.Attention {
									for _, dp := range c.DynamicPadding {
										for _, kg := range orFalse(c.KeepGrads) {
											for _, co := range orFalse(c.Compile) {
												out = append(out, trial.Spec{
													Model: m, Batch: b, SeqLen: l, GradAccum: a,
													Precision: p, Optimizer: o, GradientCheckpointing: ck,
													Attention: attentionFor(m, at), DynamicPadding: dp,
													KeepGrads: kg, Compile: co,
													Steps: s.Steps, EvalEvery: s.EvalEvery, EvalBatches: s.EvalBatches,
													Seed: uint64(len(out)),
												})
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// GridSize is len(s.Grid()) without building it.
func (s Space) GridSize() int {
	n := 0
	for _, m := range s.Models {
		c := s.ChoicesFor(m)
		pairs := 0
		for _, b := range c.BatchSizes {
			for _, a := range c.GradAccum {
				if s.MaxEffectiveBatch <= 0 || b*a <= s.MaxEffectiveBatch {
					pairs++
				}
			}
		}
		n += pairs * len(c.SeqLens) * len(c.Precisions) * len(c.Optimizers) * len(c.Checkpointing) *
			len(c.Attention) * len(c.DynamicPadding) * len(orFalse(c.KeepGrads)) * len(orFalse(c.Compile))
	}
	return n
}

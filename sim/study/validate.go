package study

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memreplay/memreplay/sim/trial"
)

// Validate says what is wrong with a space, naming the field the way the
// JSON form spells it ("overrides[0].choices.batch_sizes[2]: ..."). Every
// value of every dimension is also put through trial.Spec.Validate with
// each model that may draw it, so that a space cannot hold a combination
// sim/trial would refuse mid-study (a sequence longer than a model's
// positions, a head count that does not divide the hidden size).
func (s Space) Validate() error {
	if len(s.Models) == 0 {
		return errors.New("models: empty; name at least one model")
	}
	if err := s.Choices.validate("choices", true); err != nil {
		return err
	}
	for i, o := range s.Overrides {
		p := fmt.Sprintf("overrides[%d]", i)
		if len(o.Match) == 0 {
			return fmt.Errorf("%s.match: empty; an override needs at least one model-name substring", p)
		}
		for j, m := range o.Match {
			if m == "" {
				return fmt.Errorf("%s.match[%d]: empty string would match every model", p, j)
			}
		}
		if err := o.Choices.validate(p+".choices", false); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_effective_batch", s.MaxEffectiveBatch}, {"steps", s.Steps}, {"eval_every", s.EvalEvery}, {"eval_batches", s.EvalBatches}} {
		if f.v < 0 {
			return fmt.Errorf("%s: %d is negative", f.name, f.v)
		}
	}
	for i, m := range s.Models {
		if m.Name == "" {
			return fmt.Errorf("models[%d]: a model needs a name", i)
		}
		if err := s.validateModel(m); err != nil {
			return fmt.Errorf("models[%d] (%s): %w", i, m.Name, err)
		}
	}
	return nil
}

// validateModel tries every value the model may draw, the other dimensions
// at their first choice.
func (s Space) validateModel(m trial.Model) error {
	c := s.ChoicesFor(m)
	base := trial.Spec{Model: m, Batch: c.BatchSizes[0], SeqLen: c.SeqLens[0], GradAccum: c.GradAccum[0],
		Precision: c.Precisions[0], Optimizer: c.Optimizers[0], GradientCheckpointing: c.Checkpointing[0],
		Attention: attentionFor(m, c.Attention[0]), DynamicPadding: c.DynamicPadding[0],
		Steps: s.Steps, EvalEvery: s.EvalEvery, EvalBatches: s.EvalBatches}
	if err := base.Validate(); err != nil {
		return err
	}
	try := func(field string, i int, v any, set func(*trial.Spec)) error {
		sp := base
		set(&sp)
		if err := sp.Validate(); err != nil {
			return fmt.Errorf("%s[%d] = %v: %w", field, i, v, err)
		}
		return nil
	}
	for i, v := range c.BatchSizes {
		if err := try("batch_sizes", i, v, func(sp *trial.Spec) { sp.Batch = v }); err != nil {
			return err
		}
	}
	for i, v := range c.SeqLens {
		if err := try("seq_lens", i, v, func(sp *trial.Spec) { sp.SeqLen = v }); err != nil {
			return err
		}
	}
	for i, v := range c.GradAccum {
		if err := try("grad_accum", i, v, func(sp *trial.Spec) { sp.GradAccum = v }); err != nil {
			return err
		}
	}
	for i, v := range c.Precisions {
		if err := try("precisions", i, v, func(sp *trial.Spec) { sp.Precision = v }); err != nil {
			return err
		}
	}
	for i, v := range c.Optimizers {
		if err := try("optimizers", i, v, func(sp *trial.Spec) { sp.Optimizer = v }); err != nil {
			return err
		}
	}
	for i, v := range c.Attention {
		if err := try("attention", i, v, func(sp *trial.Spec) { sp.Attention = attentionFor(m, v) }); err != nil {
			return err
		}
	}
	for i, v := range c.KeepGrads {
		if err := try("keep_grads", i, v, func(sp *trial.Spec) { sp.KeepGrads = v }); err != nil {
			return err
		}
	}
	for i, v := range c.Compile {
		if err := try("compile", i, v, func(sp *trial.Spec) { sp.Compile = v }); err != nil {
			return err
		}
	}
	if s.MaxEffectiveBatch > 0 && slices.Min(c.BatchSizes)*slices.Min(c.GradAccum) > s.MaxEffectiveBatch {
		return fmt.Errorf("max_effective_batch %d: no batch size and accumulation of this model fit under it", s.MaxEffectiveBatch)
	}
	return nil
}

// validate checks one Choices; required says the lists may not be empty
// (the defaults; an override's empty list keeps the default).
func (c Choices) validate(path string, required bool) error {
	ints := []struct {
		name string
		v    []int
	}{{"batch_sizes", c.BatchSizes}, {"seq_lens", c.SeqLens}, {"grad_accum", c.GradAccum}}
	for _, f := range ints {
		if required && len(f.v) == 0 {
			return fmt.Errorf("%s.%s: empty; give at least one value", path, f.name)
		}
		for i, v := range f.v {
			if v <= 0 {
				return fmt.Errorf("%s.%s[%d]: %d, want a positive number", path, f.name, i, v)
			}
		}
	}
	if required && len(c.Precisions) == 0 {
		return fmt.Errorf("%s.precisions: empty; give at least one of fp32, fp16, bf16", path)
	}
	for i, p := range c.Precisions {
		switch p {
		case trial.FP32, trial.FP16, trial.BF16:
		default:
			return fmt.Errorf("%s.precisions[%d]: %q, want fp32, fp16 or bf16", path, i, p)
		}
	}
	if required && len(c.Optimizers) == 0 {
		return fmt.Errorf("%s.optimizers: empty; give at least one of adamw, sgd", path)
	}
	for i, o := range c.Optimizers {
		switch o {
		case trial.AdamW, trial.AdamWFused, trial.AdamWLoop, trial.SGD:
		default:
			return fmt.Errorf("%s.optimizers[%d]: %q, want adamw, adamw-fused, adamw-loop or sgd", path, i, o)
		}
	}
	if required && len(c.Checkpointing) == 0 {
		return fmt.Errorf("%s.checkpointing: empty; give [false], [true] or both", path)
	}
	if required && len(c.Attention) == 0 {
		return fmt.Errorf("%s.attention: empty; give eager, sdpa, manual or several", path)
	}
	for i, a := range c.Attention {
		switch a {
		case trial.Eager, trial.SDPA, trial.Manual:
		default:
			return fmt.Errorf("%s.attention[%d]: %q, want eager, sdpa or manual", path, i, a)
		}
	}
	if required && len(c.DynamicPadding) == 0 {
		return fmt.Errorf("%s.dynamic_padding: empty; give [false], [true] or both", path)
	}
	return nil
}

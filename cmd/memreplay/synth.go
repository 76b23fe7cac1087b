package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/trace"
)

const synthHelp = `Usage: memreplay synth [flags] -o OUTPUT

Generates the allocation trace of one fine-tuning trial from its
hyperparameters with memreplay's trial model (sim/trial; docs/trial-model.md):
weights, gradients, AdamW state, per-layer activations with their forward and
backward lifetimes, attention scores, temporaries, evaluation passes, as
Hugging Face's Trainer on PyTorch would request them. The output is a
memreplay trace that 'memreplay replay' and 'inspect' read.

The model is a built-in one (--model: bert-base, bert-large, roberta-base,
roberta-large, deberta-v3-base, deberta-v3-large, xlm-roberta-base) or a
custom shape (--layers, --hidden, --heads, --intermediate, --vocab, with
--arch encoder, deberta or decoder-lm); shape flags given with --model
change that model's shape.

How the program is written changes its memory as much as its shape does:
--attention manual for attention written by hand (scores, mask and softmax
as separate tensors, two seq x seq tensors per layer kept for backward),
--keep-grads when gradients stay allocated between steps
(zero_grad(set_to_none=False), or no zero_grad before a backward),
--compile for torch.compile (decoder-lm). docs/trial-model.md says what each
one allocates.

Examples:
  memreplay synth --model bert-base --batch 16 --seq-len 128 --precision fp16 -o bert.mrt
  memreplay synth --model deberta-v3-base --batch 8 --seq-len 256 --checkpointing --steps 3 -o deberta.mrt
  memreplay synth --arch decoder-lm --layers 24 --hidden 1024 --heads 16 --intermediate 4096 \
      --vocab 10000 --max-positions 128 --name cs336-medium --batch 4 --seq-len 128 --optimizer adamw-loop \
      --attention manual -o lm.mrt
  memreplay replay --capacity 24GiB bert.mrt

Flags:
`

func synthCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("synth", synthHelp, stderr)
	name := fs.String("model", "", "built-in model name (see above)")
	customName := fs.String("name", "", "name of a custom shape (default \"custom\")")
	arch := fs.String("arch", "encoder", "custom shape's architecture: encoder, deberta, decoder-lm")
	layers := fs.Int("layers", 0, "custom shape: transformer layers")
	hidden := fs.Int("hidden", 0, "custom shape: hidden size")
	heads := fs.Int("heads", 0, "custom shape: attention heads")
	inter := fs.Int("intermediate", 0, "custom shape: FFN size (default 4 x hidden)")
	vocab := fs.Int("vocab", 0, "custom shape: vocabulary size")
	maxPos := fs.Int("max-positions", 512, "custom shape: position embeddings / RoPE table rows")
	typeVocab := fs.Int("type-vocab", 2, "custom shape: token-type embeddings (encoder)")
	buckets := fs.Int("buckets", 256, "custom shape: relative-position buckets (deberta)")
	labels := fs.Int("labels", 2, "classifier outputs (encoder, deberta)")
	tf := addTrialFlags(fs)
	attn := fs.String("attention", "eager", "eager (F.softmax), sdpa or manual (softmax written in tensor ops)")
	keep := fs.Bool("keep-grads", false, "keep gradients allocated between steps (zero_grad(set_to_none=False))")
	compile := fs.Bool("compile", false, "torch.compile the model (decoder-lm): fused pointwise ops, fewer saved activations")
	steps := fs.Int("steps", trial.DefaultSteps, "optimizer steps")
	evalEvery := fs.Int("eval-every", 0, "an evaluation pass every N steps (0: once at the end)")
	evalBatches := fs.Int("eval-batches", trial.DefaultEvalBatches, "batches per evaluation pass")
	seed := fs.Uint64("seed", 1, "seed (draws the lengths under --dynamic-padding)")
	out := fs.StringP("output", "o", "", "output trace file (memreplay format)")
	quiet := fs.BoolP("quiet", "q", false, "print nothing on success")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Errorf("unexpected argument %q (the output goes to -o)", fs.Arg(0))}
	}
	if *out == "" {
		return usageError{fmt.Errorf("-o OUTPUT is required")}
	}
	var m trial.Model
	if *name != "" {
		var err error
		if m, err = trial.LookupModel(*name); err != nil {
			return usageError{fmt.Errorf("--model: %v", err)}
		}
	} else {
		for _, f := range []string{"layers", "hidden", "heads", "vocab"} {
			if !fs.Changed(f) {
				return usageError{fmt.Errorf("--model or a custom shape (--layers, --hidden, --heads, --vocab) is required; --%s is missing", f)}
			}
		}
		m = trial.Model{Name: "custom", Arch: trial.Arch(*arch), MaxPositions: *maxPos, TypeVocab: *typeVocab, PositionBuckets: *buckets}
		if m.Arch == trial.DecoderLM {
			m.TypeVocab = 0
		}
		if m.Arch != trial.DeBERTa {
			m.PositionBuckets = 0
		}
	}
	set := func(flag string, dst *int, v int) {
		if fs.Changed(flag) || *name == "" {
			*dst = v
		}
	}
	set("layers", &m.Layers, *layers)
	set("hidden", &m.Hidden, *hidden)
	set("heads", &m.Heads, *heads)
	set("vocab", &m.Vocab, *vocab)
	set("intermediate", &m.Intermediate, *inter)
	if *name == "" && !fs.Changed("intermediate") {
		m.Intermediate = 4 * m.Hidden
	}
	if fs.Changed("arch") && *name != "" {
		m.Arch = trial.Arch(*arch)
	}
	for _, f := range []struct {
		flag string
		dst  *int
		v    int
	}{{"max-positions", &m.MaxPositions, *maxPos}, {"type-vocab", &m.TypeVocab, *typeVocab}, {"buckets", &m.PositionBuckets, *buckets}} {
		if fs.Changed(f.flag) {
			*f.dst = f.v
		}
	}
	m.Labels = *labels
	if *customName != "" {
		m.Name = *customName
	}
	if *name != "" && *customName == "" && anyChanged(fs.Changed, "layers", "hidden", "heads", "vocab", "intermediate", "arch", "max-positions", "type-vocab", "buckets") {
		m.Name += "-custom"
	}
	s := tf.spec(m)
	s.Steps, s.EvalEvery, s.EvalBatches = *steps, *evalEvery, *evalBatches
	s.Seed, s.Attention, s.KeepGrads, s.Compile = *seed, *attn, *keep, *compile
	if *steps <= 0 || *evalBatches <= 0 || s.GradAccum <= 0 {
		return usageError{fmt.Errorf("--steps, --eval-batches and --grad-accum must be positive")}
	}
	if err := s.Validate(); err != nil {
		return usageError{fmt.Errorf("bad trial: %v", err)}
	}
	r, err := s.Reader()
	if err != nil {
		return usageError{err}
	}
	tmp, err := createOut(*out)
	if err != nil {
		return inputError{fmt.Errorf("cannot write %s: %w", *out, err)}
	}
	defer tmp.abort()
	n, peak, err := writeTrial(tmp, r)
	if err != nil {
		return err
	}
	if err := tmp.commit(); err != nil {
		return inputError{err}
	}
	if !*quiet {
		e := s.Estimate()
		fmt.Fprintf(stdout, "%s: %s, %d events, peak requested %s (estimate %s), %d params, modelled duration %v\n",
			*out, s, n, gib(peak), gib(e.PeakBytes), m.Params(), s.Duration())
	}
	return nil
}

// trialFlags are the flags of a trial's shape that synth and estimate
// declare alike (each adds its own --model, --attention and --steps, whose
// help differs).
type trialFlags struct {
	batch, seq, ga *int
	prec, opt      *string
	ckpt, dyn      *bool
}

func addTrialFlags(fs *pflag.FlagSet) trialFlags {
	return trialFlags{
		batch: fs.Int("batch", 8, "per-device batch size"),
		seq:   fs.Int("seq-len", 128, "sequence length (padding length)"),
		ga:    fs.Int("grad-accum", 1, "gradient accumulation steps"),
		prec:  fs.String("precision", "fp32", "fp32, fp16 or bf16 (AMP autocast)"),
		opt:   fs.String("optimizer", "adamw", "adamw (foreach), adamw-fused, adamw-loop or sgd"),
		ckpt:  fs.Bool("checkpointing", false, "gradient checkpointing"),
		dyn:   fs.Bool("dynamic-padding", false, "pad each batch to a drawn length in [seq-len/2, seq-len]"),
	}
}

// spec is model m's trial with these flags' values; the caller sets the rest.
func (t trialFlags) spec(m trial.Model) trial.Spec {
	return trial.Spec{Model: m, Batch: *t.batch, SeqLen: *t.seq, GradAccum: *t.ga, Precision: trial.Precision(strings.ToLower(*t.prec)),
		Optimizer: *t.opt, GradientCheckpointing: *t.ckpt, DynamicPadding: *t.dyn}
}

func anyChanged(changed func(string) bool, flags ...string) bool {
	for _, f := range flags {
		if changed(f) {
			return true
		}
	}
	return false
}

func gib(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// writeTrial streams the trial into a native trace and measures its peak
// live (requested) bytes on the way.
func writeTrial(w io.Writer, r trace.Reader) (events int64, peak uint64, err error) {
	tw, err := trace.NewWriter(w, r.Header())
	if err != nil {
		return 0, 0, err
	}
	tw.SetStacks(r.Stacks())
	live := map[uint64]uint64{}
	var cur uint64
	err = eachEvent(r, func(e *trace.Event) error {
		switch e.Action {
		case trace.ActionAlloc:
			live[e.Addr] = e.Size
			cur += e.Size
			peak = max(peak, cur)
		case trace.ActionFreeRequested:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		}
		return tw.WriteEvent(e, r.Stacks())
	})
	if err != nil {
		return 0, 0, err
	}
	return tw.Events(), peak, tw.Close()
}

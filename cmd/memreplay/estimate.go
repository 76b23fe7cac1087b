package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/study"
	"github.com/memreplay/memreplay/sim/trial"
)

const estimateHelp = `Usage: memreplay estimate [flags] [TRACE]

Predicts one trial's GPU memory before it runs: its peak live bytes, its
peak reserved bytes (what PyTorch's caching allocator holds, live plus
cached), the CUDA context its process adds, and the margin of the reserved
peak over the hand count (weights + gradients + optimizer + activations).
From hyperparameters, the trial model's allocation sequence runs through the
allocator on a simulated GPU (a few optimizer steps: a trial's memory repeats
from its third step); from a recorded TRACE, the trace is replayed. It takes
milliseconds, so a study can call it before every trial (the Python gate in
python/memreplay does; docs/optuna.md).

The trial is --spec JSON, in the spelling of 'trials' state files:
  {"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16",
   "grad_accum": 1, "optimizer": "adamw", "gradient_checkpointing": false,
   "attention": "eager", "dynamic_padding": false, "steps": 10}
(only "model" is required; a custom shape is an object as in a space file),
or the flags --model, --batch, --seq-len, --precision, ... below.

Examples:
  memreplay estimate --model bert-large --batch 16 --seq-len 128 --precision fp16
  memreplay estimate --spec '{"model": "deberta-v3-base", "batch": 8, "seq_len": 256}' --format json
  memreplay estimate --alloc-conf expandable_segments:True traces/trial/bert-base_b16_s128_fp16.mrt

Output (--format json): one object with peak_live_bytes, peak_reserved_bytes,
analytic_live_bytes, margin, context_bytes, need_bytes (reserved + context:
what the trial takes from the GPU), retries, events, steps_simulated,
alloc_conf, label, source.

Flags:
`

func estimateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("estimate", estimateHelp, stderr)
	specText := fs.String("spec", "", "the trial's hyperparameters as JSON (above)")
	model := fs.String("model", "", "built-in model (bert-base, bert-large, roberta-base, roberta-large, deberta-v3-base, deberta-v3-large, xlm-roberta-base)")
	tf := addTrialFlags(fs)
	attn := fs.String("attention", "eager", "eager or sdpa")
	steps := fs.Int("steps", trial.DefaultSteps, "optimizer steps of the trial")
	allocConf := fs.String("alloc-conf", "", "allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax; default PyTorch's, or the trace's own)")
	ctxSize := fs.String("context-overhead", "", "one process's CUDA context (default 500MiB)")
	format := fs.String("format", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if *format != "table" && *format != "json" {
		return usageError{fmt.Errorf("--format %q: want table or json", *format)}
	}
	var o estimate.Options
	if *allocConf != "" {
		c, err := parseAllocConf(*allocConf)
		if err != nil {
			return err
		}
		o.Config = c
	}
	if *ctxSize != "" {
		c, err := parseSize(*ctxSize)
		if err != nil {
			return usageError{fmt.Errorf("--context-overhead: %v", err)}
		}
		o.ContextOverhead = c
	}
	specFlags := anyChanged(fs.Changed, "model", "batch", "seq-len", "grad-accum", "precision", "optimizer", "attention", "checkpointing", "dynamic-padding", "steps")
	var p estimate.Prediction
	var err error
	switch {
	case fs.NArg() > 1:
		return usageError{fmt.Errorf("one trace at a time (got %d)", fs.NArg())}
	case fs.NArg() == 1 && (*specText != "" || specFlags):
		return usageError{fmt.Errorf("a TRACE or a trial's hyperparameters (--spec, --model, ...), not both")}
	case fs.NArg() == 1:
		o2, oerr := openTrace(fs.Arg(0))
		if oerr != nil {
			return oerr
		}
		defer o2.Close()
		p, err = estimate.Trace(o2.Reader, fs.Arg(0), o)
	case *specText != "" && specFlags:
		return usageError{fmt.Errorf("--spec or the flags --model, --batch, ..., not both")}
	case *specText != "":
		sp, serr := study.ParseSpec([]byte(*specText))
		if serr != nil {
			return usageError{fmt.Errorf("--spec: %v", serr)}
		}
		p, err = estimate.Spec(sp, o)
	case *model == "":
		return usageError{fmt.Errorf("a TRACE, --spec JSON or --model is required")}
	default:
		m, merr := trial.LookupModel(*model)
		if merr != nil {
			return usageError{fmt.Errorf("--model: %v", merr)}
		}
		sp := tf.spec(m)
		sp.Steps, sp.Attention, sp.Seed = *steps, *attn, 1
		if verr := sp.Validate(); verr != nil {
			return usageError{fmt.Errorf("bad trial: %v", verr)}
		}
		p, err = estimate.Spec(sp, o)
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	conf := p.AllocConf
	if conf == "" {
		conf = "PyTorch's default allocator settings"
	}
	fmt.Fprintf(stdout, "%s (from its %s, %s)\n", p.Label, p.Source, conf)
	fmt.Fprintf(stdout, "  peak live      %s\n", gib(p.PeakLiveBytes))
	fmt.Fprintf(stdout, "  peak reserved  %s\n", gib(p.PeakReservedBytes))
	if p.AnalyticLiveBytes > 0 {
		fmt.Fprintf(stdout, "  hand count     %s (reserved is %+.1f%% of it)\n", gib(p.AnalyticLiveBytes), 100*p.Margin)
	} else {
		fmt.Fprintf(stdout, "  reserved over live  %+.1f%%\n", 100*p.Margin)
	}
	fmt.Fprintf(stdout, "  with context   %s (what the trial takes from the GPU)\n", gib(p.NeedBytes))
	return nil
}

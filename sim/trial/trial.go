// Package trial is the workload model of one hyperparameter-search trial:
// the sequence of CUDA caching-allocator requests that fine-tuning a
// transformer with Hugging Face's Trainer on PyTorch makes, generated from
// the trial's hyperparameters (Spec) and streamed as a trace.Reader.
//
// # What is allocated, when
//
// A trial is a schedule of phases (schedule.go): loading the weights, for
// each optimizer step GradAccum micro-batches of forward and backward, the
// optimizer step, evaluation passes, and the teardown. Each phase's events
// are generated into a small buffer and handed out by Next, so a reader
// holds O(layers) state however many steps the trial has.
//
//   - load: model.to("cuda") copies every parameter (models.go lists them
//     in module order: embeddings, per layer q/k/v/output with biases,
//     LayerNorms, FFN, then the head), one fp32 allocation each.
//   - micro-batch: the batch tensors (input_ids, attention_mask, labels,
//     token_type_ids, int64); the forward op by op (layers.go) over a tiny
//     autograd engine (graph.go) that allocates each op's output, keeps what
//     autograd saves for backward (linear inputs, LayerNorm input/mean/rstd,
//     softmax outputs, dropout masks, GELU inputs, ...) and frees the rest
//     when its last Python reference goes; then backward in reverse, which
//     allocates each input's gradient, frees the output's gradient and the
//     node's saved tensors, so activations go in reverse order. Parameter
//     gradients are allocated by the first backward of a step (AccumulateGrad
//     steals the tensor); later micro-batches add in place (a temporary each).
//   - AMP (fp16/bf16 autocast): matmuls run in 16 bits; each linear casts its
//     input (a saved 16-bit copy) and, once per forward through the autocast
//     cache, its weight (16-bit copies of all weights live until their
//     layer's backward); LayerNorm, softmax and cross-entropy run in fp32;
//     weights, gradients and optimizer state stay fp32. fp16 adds
//     GradScaler's unscale (found_inf, inv_scale scalars).
//   - gradient checkpointing: a layer's forward runs without saving; only its
//     input is kept; backward reruns the layer's forward (allocating its
//     saved tensors again) just before backpropagating through it.
//   - optimizer step (optimizer.go): clip_grad_norm_ (HF max_grad_norm=1:
//     a norm scalar per gradient, their stack, the total), then AdamW as
//     torch.optim does by default on CUDA (foreach): on the first step its
//     state is created lazily per parameter (exp_avg, exp_avg_sq, in
//     parameter order); every step _foreach_sqrt allocates a parameter-sized
//     temporary per tensor of each parameter group (decay, no-decay) and
//     frees them after the update. "adamw-fused" has no temporaries,
//     "adamw-loop" (foreach=False) one parameter's worth at a time, "sgd"
//     (momentum 0) no state. Then model.zero_grad() frees the gradients
//     (set_to_none=True, torch >= 2.0), so they are reallocated next step.
//   - eval pass: model.eval() under no_grad: no dropout masks, nothing
//     saved, each activation freed after its last use; the classifier's
//     logits are gathered with torch.cat across batches (a growing buffer).
//   - teardown: optimizer state, then weights, freed; trial_end.
//
// Three switches say how the program is written: Attention "manual"
// (softmax and masking in separate tensor ops, layers_manual.go), KeepGrads
// (gradients not freed by zero_grad) and Compile (torch.compile of a
// decoder LM, compile.go). docs/trial-model.md tabulates every switch's
// memory effect.
//
// Sizes are element counts times dtype bytes, as PyTorch requests them;
// rounding is the allocator's business. Addresses are fake but unique for
// the trial (never reused), so a free names its allocation.
//
// # Time
//
// TimeUS is modelled (timing.go): each phase lasts its FLOPs at a stated
// reference throughput (6 x matmul params x tokens for a training
// micro-batch, plus the attention terms, 8x with checkpointing, 2x for
// eval) or its bytes at a reference bandwidth (optimizer, weight load); the
// events of a phase are spread over it in proportion to each op's own cost.
// Duration walks the same schedule without generating events.
//
// # Reuse
//
// A sweep runs thousands of trials. A consumer that reads only events, and
// not the stack table, may end a reader with its Release method (the
// reader satisfies interface{ Release() }) instead of Close: the next
// reader Spec.Reader makes, in any goroutine, then reuses its memory, and
// a trial costs next to no heap allocation (pool.go). sim/workers does
// that. The events are the same either way.
//
// # Seed
//
// With DynamicPadding (DataCollatorWithPadding, pad_to_multiple_of=8) the
// seed draws each batch's padded length between SeqLen/2 and SeqLen; the
// changing activation sizes are what fragments a long-lived cache. Without
// it every batch is SeqLen long and the seed changes nothing.
package trial

import (
	"errors"
	"fmt"
	"strings"
)

// Precision is the training precision.
type Precision string

const (
	FP32 Precision = "fp32"
	FP16 Precision = "fp16" // AMP autocast to float16, fp32 master weights, GradScaler
	BF16 Precision = "bf16" // AMP autocast to bfloat16, fp32 master weights
)

// Optimizers the model knows.
const (
	AdamW      = "adamw"       // torch.optim.AdamW, foreach (the CUDA default)
	AdamWFused = "adamw-fused" // fused=True: no temporaries
	AdamWLoop  = "adamw-loop"  // foreach=False: per-parameter temporaries
	SGD        = "sgd"         // momentum 0: no state
)

// Attention implementations.
const (
	Eager = "eager" // materialised batch*heads*seq*seq scores (HF "eager"; DeBERTa always)
	SDPA  = "sdpa"  // scaled_dot_product_attention, memory-efficient kernel
	// Manual is attention written by hand in tensor ops (layers_manual.go):
	// scores, scaling, a boolean mask with torch.where, and softmax as
	// max, subtract, exp, sum, divide, each its own seq*seq tensor.
	Manual = "manual"
)

// Defaults for zero fields.
const (
	DefaultSteps       = 10
	DefaultEvalBatches = 4
)

// Spec is one trial's hyperparameters (what a sampler picks).
type Spec struct {
	Model                 Model
	Batch, SeqLen         int
	GradAccum             int       // micro-batches per optimizer step; 0 means 1
	Precision             Precision // "" means FP32
	Optimizer             string    // "adamw" (default when ""), "adamw-fused", "adamw-loop", "sgd"
	GradientCheckpointing bool
	Steps                 int // optimizer steps in the trial; 0 means DefaultSteps
	EvalEvery             int // an evaluation pass every N steps; 0: once at the end
	EvalBatches           int // batches per evaluation pass; 0 means DefaultEvalBatches
	Seed                  uint64
	// Attention is "eager" (default; "" means eager) or "sdpa". DeBERTa
	// has only its own (eager) attention.
	Attention string
	// DynamicPadding pads each batch to its longest sequence (rounded up to
	// 8) instead of to SeqLen; the seed draws the lengths.
	DynamicPadding bool
	// KeepGrads keeps the parameter gradients allocated between steps, as
	// zero_grad(set_to_none=False) or a loop that never zeroes them before
	// a backward does: from the second step on, the forward runs with every
	// .grad buffer live and backward adds into them in place.
	KeepGrads bool
	// Compile models torch.compile (Inductor, default mode) of the model:
	// pointwise ops fused, and only what AOTAutograd's min-cut partitioner
	// saves kept for backward (compile.go). decoder-lm only.
	Compile bool
}

func (s Spec) gradAccum() int {
	if s.GradAccum <= 0 {
		return 1
	}
	return s.GradAccum
}

func (s Spec) precision() Precision {
	if s.Precision == "" {
		return FP32
	}
	return s.Precision
}

func (s Spec) optimizer() string {
	if s.Optimizer == "" {
		return AdamW
	}
	return strings.ToLower(s.Optimizer)
}

func (s Spec) steps() int {
	if s.Steps <= 0 {
		return DefaultSteps
	}
	return s.Steps
}

func (s Spec) evalBatches() int {
	if s.EvalBatches <= 0 {
		return DefaultEvalBatches
	}
	return s.EvalBatches
}

func (s Spec) attention() string {
	if s.Attention == "" {
		return Eager
	}
	return strings.ToLower(s.Attention)
}

// Validate reports the first bad value.
func (s Spec) Validate() error {
	if err := s.Model.Validate(); err != nil {
		return err
	}
	if s.Batch <= 0 {
		return fmt.Errorf("batch must be positive, got %d", s.Batch)
	}
	if s.SeqLen <= 0 {
		return fmt.Errorf("sequence length must be positive, got %d", s.SeqLen)
	}
	if s.Batch > 1<<16 || s.SeqLen > 1<<20 {
		return fmt.Errorf("batch %d or sequence length %d out of range", s.Batch, s.SeqLen)
	}
	// Learned positions and RoPE tables end at MaxPositions; DeBERTa's
	// relative positions do not.
	if s.Model.MaxPositions > 0 && s.Model.arch() != DeBERTa && s.SeqLen > s.Model.MaxPositions {
		return fmt.Errorf("sequence length %d exceeds %s's %d positions", s.SeqLen, s.Model.Name, s.Model.MaxPositions)
	}
	if s.GradAccum < 0 || s.Steps < 0 || s.EvalEvery < 0 || s.EvalBatches < 0 {
		return errors.New("grad accum, steps, eval every and eval batches must not be negative")
	}
	if s.Steps > 1<<24 || s.GradAccum > 1<<12 || s.EvalBatches > 1<<16 {
		return errors.New("steps, grad accum or eval batches out of range")
	}
	switch s.precision() {
	case FP32, FP16, BF16:
	default:
		return fmt.Errorf("unknown precision %q (fp32, fp16, bf16)", s.Precision)
	}
	switch s.optimizer() {
	case AdamW, AdamWFused, AdamWLoop, SGD:
	default:
		return fmt.Errorf("unknown optimizer %q (adamw, adamw-fused, adamw-loop, sgd)", s.Optimizer)
	}
	switch s.attention() {
	case Eager:
	case SDPA, Manual:
		if s.Model.arch() == DeBERTa {
			return fmt.Errorf("%s has no %s attention (DeBERTa's disentangled attention is eager only)", s.Model.Name, s.attention())
		}
	default:
		return fmt.Errorf("unknown attention %q (eager, sdpa, manual)", s.Attention)
	}
	if s.Compile {
		if s.Model.arch() != DecoderLM {
			return fmt.Errorf("compile is modelled for decoder-lm only, not %s (%s)", s.Model.Name, s.Model.arch())
		}
		if s.GradientCheckpointing {
			return errors.New("compile with gradient checkpointing is not modelled")
		}
	}
	// The largest single tensor must stay addressable with room to spare.
	B, S := uint64(s.Batch), uint64(s.SeqLen)
	if B*uint64(s.Model.Heads)*S*S > 1<<40 || B*S*uint64(max(s.Model.Vocab, s.Model.Hidden, s.Model.Intermediate)) > 1<<40 {
		return fmt.Errorf("batch %d x seq %d is too large for %s (a tensor over 2^40 elements)", s.Batch, s.SeqLen, s.Model.Name)
	}
	return nil
}

// String is a short label, e.g. "bert-base b32 s128 fp16".
func (s Spec) String() string {
	var b strings.Builder
	name := s.Model.Name
	if name == "" {
		name = fmt.Sprintf("custom-L%d-H%d", s.Model.Layers, s.Model.Hidden)
	}
	fmt.Fprintf(&b, "%s b%d s%d %s", name, s.Batch, s.SeqLen, s.precision())
	if s.gradAccum() > 1 {
		fmt.Fprintf(&b, " ga%d", s.gradAccum())
	}
	if s.GradientCheckpointing {
		b.WriteString(" ckpt")
	}
	if s.optimizer() != AdamW {
		b.WriteString(" " + s.optimizer())
	}
	if s.attention() != Eager {
		b.WriteString(" " + s.attention())
	}
	if s.DynamicPadding {
		b.WriteString(" dynpad")
	}
	if s.KeepGrads {
		b.WriteString(" keepgrads")
	}
	if s.Compile {
		b.WriteString(" compile")
	}
	return b.String()
}

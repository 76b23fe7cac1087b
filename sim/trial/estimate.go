package trial

// Estimate is the analytic pre-trial memory estimate (no replay): what a
// "model-aware batch limit" would compute. PeakBytes is peak live bytes as
// requested: weights + grads + optimizer + activations at peak.
type Estimate struct {
	WeightsBytes, GradBytes, OptimizerBytes, ActivationBytes, PeakBytes uint64
}

// Estimate adds up what a careful user would count, in the textbook way
// (Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models", 2022, section 4.1, with the saved tensors counted at
// the dtypes autocast gives them):
//
//   - weights: 4 bytes per parameter; under AMP plus 2 per matmul parameter
//     for autocast's 16-bit copies;
//   - gradients: 4 per parameter; optimizer: 8 per parameter for AdamW
//     (exp_avg, exp_avg_sq), 0 for SGD without momentum;
//   - activations: what autograd saves per layer, times the layers (with
//     checkpointing: each layer's input plus one layer's saved tensors),
//     plus the LM head's logits and log-probabilities.
//
// It is the sum of the four, as if all were live at once. It leaves out
// what only a replay sees: temporaries in flight (input gradients during
// backward, the foreach optimizer's sqrt buffers, attention temporaries),
// and the fact that parameter gradients grow while activations shrink. The
// gap to the generated trace's peak is measured in estimate_test.go and
// docs/trial-model.md.
func (s Spec) Estimate() Estimate {
	if s.Validate() != nil {
		return Estimate{}
	}
	m := s.Model
	N := m.Params()
	amp := s.precision() != FP32
	var e Estimate
	e.WeightsBytes = 4 * N
	if amp {
		e.WeightsBytes += 2 * m.matmulParams()
	}
	e.GradBytes = 4 * N
	if s.optimizer() != SGD {
		e.OptimizerBytes = 8 * N
	}
	layer := s.layerActivationBytes()
	L := u(m.Layers)
	T := u(s.Batch) * u(s.SeqLen)
	if s.GradientCheckpointing {
		e.ActivationBytes = L*4*T*u(m.Hidden) + layer
	} else {
		e.ActivationBytes = L * layer
	}
	if m.arch() == DecoderLM {
		per := uint64(8) // fp32 logits and log_softmax
		if amp {
			per = 10 // 16-bit logits, their fp32 cast, log_softmax
		}
		e.ActivationBytes += per * T * u(m.Vocab)
	}
	e.PeakBytes = e.WeightsBytes + e.GradBytes + e.OptimizerBytes + e.ActivationBytes
	return e
}

// layerActivationBytes is what one layer saves for backward, with T =
// batch x seq tokens, H hidden, I intermediate, and A heads:
//
//	encoder, fp32:  34 T H + 8 T I + 16 T + 9 B A S^2
//	encoder, AMP:   26 T H + 4 T I + 16 T + 7 B A S^2
//	decoder, fp32:  40 T H + 20 T I + 16 T + 4 B A S^2
//	decoder, AMP:   34 T H + 10 T I + 16 T + 6 B A S^2
//
// (encoder: the layer input, q, k, v, the context, two LayerNorm inputs and
// the FFN input at 4 bytes, two dropout masks at 1, GELU's input and
// output; softmax output 4, its dropout mask 1 and the dropped copy 4.
// Under AMP the linears save 16-bit casts and the probabilities' 16-bit
// copy replaces the fp32 one.) With SDPA the seq^2 terms are replaced by
// the kernel's saved output. DeBERTa is counted as an encoder: its
// relative-position scores are what a user would not know to add.
//
// Manual attention saves exp's output where F.softmax saves its own, plus
// the row sums and argmax indices (12 B A S) and its bool mask (S^2, or B S
// for an encoder's padding mask); without dropout (decoder,
// fp32) the probabilities are a second seq^2 tensor the matmul saves (8 B A
// S^2). Compiled (compile.go): 32 T H + 12 T I + 8 T + 4 B A S^2 in fp32,
// 20 T H + 6 T I + 8 T + 4 B A S^2 under AMP.
func (s Spec) layerActivationBytes() uint64 {
	m := s.Model
	B, S, H, I, A := u(s.Batch), u(s.SeqLen), u(m.Hidden), u(m.Intermediate), u(m.Heads)
	T := B * S
	amp := s.precision() != FP32
	var th, ti, ss uint64
	switch {
	case s.Compile && amp:
		th, ti, ss = 20, 6, 4
	case s.Compile:
		th, ti, ss = 32, 12, 4
	case m.arch() == DecoderLM && amp:
		th, ti, ss = 34, 10, 6
	case m.arch() == DecoderLM:
		th, ti, ss = 40, 20, 4
	case amp:
		th, ti, ss = 26, 4, 7
	default:
		th, ti, ss = 34, 8, 9
	}
	b := th*T*H + ti*T*I + 16*T
	if s.Compile {
		b -= 8 * T // two norms' rstd, no mean
	}
	if s.attention() == Manual && !s.Compile {
		b += 12 * B * A * S
		if m.arch() == DecoderLM {
			b += S * S // the causal bool mask, saved by where
			if !amp {
				ss += 4
			}
		} else {
			b += B * S // the padding bool mask
		}
	}
	if s.attention() == SDPA {
		act := uint64(4)
		if amp {
			act = 2
		}
		return b + act*T*H
	}
	return b + ss*B*A*S*S
}

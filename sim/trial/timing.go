package trial

import (
	"math"
	"time"
)

// The time model. A phase lasts its work at a reference device's achieved
// throughput; the figures are assumptions about a 24 GiB RTX 4090 /
// A5000-class GPU (the BERT-family study's 23.56 GiB card), stated here and in
// docs/trial-model.md, not measurements.
const (
	// ReferenceFP32FLOPS is the achieved fp32 matmul throughput (TF32
	// off, PyTorch's default for matmuls): 20 TFLOP/s.
	ReferenceFP32FLOPS = 20e12
	// ReferenceAMPFLOPS is the achieved fp16/bf16 tensor-core throughput
	// with fp32 accumulation: 60 TFLOP/s.
	ReferenceAMPFLOPS = 60e12
	// ReferenceBandwidth is the achieved device memory bandwidth, bytes/s,
	// for memory-bound phases (optimizer) and elementwise ops.
	ReferenceBandwidth = 800e9
	// ReferenceHostToDevice is the host-to-device copy rate for loading
	// the weights, bytes/s.
	ReferenceHostToDevice = 12e9
)

func (s Spec) flopsPerUS() float64 {
	if s.precision() == FP32 {
		return ReferenceFP32FLOPS / 1e6
	}
	return ReferenceAMPFLOPS / 1e6
}

// matmulParams counts the parameters that take part in matmuls per token
// (embedding lookups do not; an LM head does).
func (m Model) matmulParams() uint64 {
	H, I, V := u(m.Hidden), u(m.Intermediate), u(m.Vocab)
	var per uint64
	switch m.arch() {
	case DecoderLM:
		per = 4*H*H + 3*H*I
		return u(m.Layers)*per + V*H
	default:
		per = 4*H*H + 2*H*I
		return u(m.Layers)*per + H*H + u(m.labels())*H
	}
}

// forwardFLOPs is one forward pass over batch x seq: 2 x matmul params x
// tokens, plus the attention matmuls (QK^T and PV: 4 x batch x seq^2 x
// hidden per layer) and DeBERTa's c2p/p2c (4 x batch x seq x 2 buckets x
// hidden per layer).
func (s Spec) forwardFLOPs(seq int) float64 {
	m := s.Model
	B, S, H, L := float64(s.Batch), float64(seq), float64(m.Hidden), float64(m.Layers)
	f := 2*float64(m.matmulParams())*B*S + 4*L*B*S*S*H
	if m.arch() == DeBERTa {
		f += 4 * L * B * S * 2 * float64(m.PositionBuckets) * H
	}
	return f
}

// phaseUS is a phase's modelled duration in microseconds.
func (s Spec) phaseUS(p phase) float64 {
	m := s.Model
	switch p.kind {
	case phLoad:
		return float64(4*m.Params()) / ReferenceHostToDevice * 1e6
	case phMicro:
		// forward + backward (2x forward); checkpointing reruns the forward.
		f := 3 * s.forwardFLOPs(p.seq)
		if s.GradientCheckpointing {
			f += s.forwardFLOPs(p.seq)
		}
		return f / s.flopsPerUS()
	case phOptim:
		return float64(m.Params()*s.optimizerBytesPerParam()) / ReferenceBandwidth * 1e6
	case phEval:
		return s.forwardFLOPs(p.seq) / s.flopsPerUS()
	}
	return 0
}

// optimizerBytesPerParam is the memory traffic of clip_grad_norm_ (read
// and scale the gradient: 8) plus the update: AdamW reads p, g, m, v and
// writes p, m, v (28), foreach/loop add the sqrt temporary's write and read
// (8); SGD reads p, g and writes p (12).
func (s Spec) optimizerBytesPerParam() uint64 {
	switch s.optimizer() {
	case SGD:
		return 8 + 12
	case AdamWFused:
		return 8 + 28
	}
	return 8 + 36
}

// Duration is the trial's modelled run time alone on the reference GPU:
// the TimeUS of its trial_end.
func (s Spec) Duration() time.Duration {
	if s.Validate() != nil {
		return 0
	}
	sc := newSchedule(s)
	var clock float64
	for {
		p, ok := sc.next()
		if !ok {
			break
		}
		clock += s.phaseUS(p)
	}
	return time.Duration(int64(math.Floor(clock))) * time.Microsecond
}

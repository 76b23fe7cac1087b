package trial

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// Tests of the program switches (KeepGrads, Attention "manual", Compile):
// each models one PyTorch mechanism, pinned by what it must keep alive.

// snapshot is the live state of a generated trial at one moment.
type snapshot struct {
	live  uint64
	sizes map[uint64]int // live allocations by size
}

// snapshotAt runs s and returns the live state when the marker named
// marker has been passed and then (site non-empty) just before the first
// allocation at site.
func snapshotAt(t *testing.T, s Spec, marker, site string) snapshot {
	t.Helper()
	r, err := s.Reader()
	require.NoError(t, err)
	live := map[uint64]uint64{}
	var cur uint64
	in := false
	var e trace.Event
	snap := func() snapshot {
		sn := snapshot{live: cur, sizes: map[uint64]int{}}
		for _, sz := range live {
			sn.sizes[sz]++
		}
		return sn
	}
	for {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if e.Action == trace.ActionMarker && e.Label == marker {
			if site == "" {
				return snap()
			}
			in = true
		}
		if in && e.Action == trace.ActionAlloc {
			if fr := r.Stacks().Frames(e.Stack); len(fr) > 0 && fr[0].Name == site {
				return snap()
			}
		}
		switch e.Action {
		case trace.ActionAlloc:
			live[e.Addr] = e.Size
			cur += e.Size
		case trace.ActionFreeRequested:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		}
	}
	t.Fatalf("%s: marker %q / site %q not reached", s, marker, site)
	return snapshot{}
}

func TestKeepGradsKeepsGradientBuffers(t *testing.T) {
	for _, base := range []Spec{
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 3, Optimizer: AdamWLoop},
		{Model: cs336Small, Batch: 8, SeqLen: 128, Steps: 3, Optimizer: SGD, Attention: Manual},
		{Model: model(t, "bert-base"), Batch: 8, SeqLen: 128, Steps: 3, GradAccum: 2, Precision: FP16, Optimizer: SGD},
	} {
		keep := base
		keep.KeepGrads = true
		grads := 4 * base.Model.Params()
		// Before the first backward nothing differs: no gradient exists yet.
		assert.Equal(t, snapshotAt(t, base, "step 1", "loss.grad").live, snapshotAt(t, keep, "step 1", "loss.grad").live, base.String())
		for _, step := range []string{"step 2", "step 3"} {
			plain, kept := snapshotAt(t, base, step, ""), snapshotAt(t, keep, step, "")
			assert.Equal(t, plain.live+grads, kept.live, "%s %s: every .grad buffer stays between steps", keep, step)
			// At the end of the next forward the gradients are still all
			// there: the forward runs on top of them.
			pf, kf := snapshotAt(t, base, step, "loss.grad"), snapshotAt(t, keep, step, "loss.grad")
			assert.Equal(t, pf.live+grads, kf.live, "%s %s", keep, step)
		}
		// The peak grows by at most the gradients (set_to_none already has
		// part of them live at its backward peak); when activations make
		// the peak (no optimizer state here), by something.
		pp, kp := peakOf(t, base), peakOf(t, keep)
		assert.LessOrEqual(t, kp, pp+grads)
		switch {
		case base.GradAccum > 1:
			// The second micro-batch of every step already runs its forward
			// on all gradients: keeping them across steps adds nothing.
			assert.Equal(t, pp, kp, base.String())
		case base.Optimizer == SGD:
			assert.Greater(t, kp, pp, base.String())
		}
	}
}

// activationsPerLayer is what one decoder layer keeps for backward: the
// live bytes at the start of backward, for a model with one more layer,
// less the extra layer's weights.
func activationsPerLayer(t *testing.T, s Spec) uint64 {
	at := func(layers int) uint64 {
		sp := s
		sp.Model.Layers = layers
		return snapshotAt(t, sp, "step 1", "loss.grad").live
	}
	m1 := s.Model
	m1.Layers = 3
	m2 := s.Model
	m2.Layers = 2
	return at(3) - at(2) - 4*(m1.Params()-m2.Params())
}

func TestSavedActivationsPerLayer(t *testing.T) {
	m := Model{Name: "lm", Arch: DecoderLM, Layers: 2, Hidden: 128, Heads: 4, Intermediate: 512, Vocab: 1000, MaxPositions: 256}
	B, S, H, I, A := uint64(2), uint64(96), uint64(128), uint64(512), uint64(4)
	T, BAS := B*S, B*A*S
	for _, c := range []struct {
		s    Spec
		want uint64
	}{
		// The documented formulas (docs/trial-model.md): F.softmax saves its
		// output only.
		{Spec{Attention: Eager}, 40*T*H + 20*T*I + 16*T + 4*BAS*S},
		// By hand: exp's output and the probabilities (two seq^2 tensors),
		// the row sums (fp32) and argmax indices (int64), the bool mask.
		{Spec{Attention: Manual}, 40*T*H + 20*T*I + 16*T + 8*BAS*S + 12*BAS + S*S},
		// Under bf16 exp runs in fp32 and the matmul saves the probabilities'
		// 16-bit copy; the sums fp32, the max indices int64. (The matmuls
		// also keep the layer's 16-bit weight copies, counted as weights.)
		{Spec{Attention: Manual, Precision: BF16}, 34*T*H + 10*T*I + 16*T + 6*BAS*S + 12*BAS + S*S},
		// Compiled: every matmul input (two norm outputs, rotated q and k,
		// v, the probabilities, the context, the gated product), the w1 and
		// w3 outputs, the residual stream (layer input and sum, fp32), two
		// rstd rows; one seq^2 tensor, hand-written or not.
		{Spec{Compile: true}, 32*T*H + 12*T*I + 8*T + 4*BAS*S},
		{Spec{Compile: true, Attention: Manual}, 32*T*H + 12*T*I + 8*T + 4*BAS*S},
		// bf16: the residual stream stays fp32; the 16-bit probabilities
		// and the 16-bit scores the fp32 softmax is recomputed from.
		{Spec{Compile: true, Precision: BF16}, 20*T*H + 6*T*I + 8*T + 4*BAS*S},
	} {
		s := c.s
		s.Model, s.Batch, s.SeqLen, s.Steps = m, int(B), int(S), 1
		got := activationsPerLayer(t, s)
		if s.precision() != FP32 {
			got -= 2 * (4*H*H + 3*H*I) // the 16-bit weight copies the matmuls keep
		}
		assert.Equal(t, c.want, got, "%s: saved bytes per layer", s)
		// The estimate counts the same per layer.
		assert.Equal(t, c.want, s.layerActivationBytes(), "%s: Estimate's per-layer bytes", s)
	}
}

func TestManualAttentionTensors(t *testing.T) {
	s := Spec{Model: cs336Small, Batch: 2, SeqLen: 96, Steps: 1, Attention: Manual}
	ss := uint64(2 * 12 * 96 * 96 * 4) // one fp32 batch x heads x seq x seq tensor
	at := snapshotAt(t, s, "step 1", "loss.grad")
	assert.Equal(t, 2*cs336Small.Layers, at.sizes[ss], "exp and probabilities saved per layer")
	s.Attention = Eager
	assert.Equal(t, cs336Small.Layers, snapshotAt(t, s, "step 1", "loss.grad").sizes[ss], "F.softmax saves its output only")
	// In flight in the last layer: before the division, the masked scores
	// (a Python local until the function returns), the difference (until
	// softmax returns) and exp; at the P·V matmul, the masked scores, exp
	// and the probabilities. Plus the earlier layers' saved pairs.
	s.Attention = Manual
	div := snapshotAt(t, s, "step 1", "layer.11.attention.probs")
	assert.Equal(t, 2*(cs336Small.Layers-1)+3, div.sizes[ss])
	pv := snapshotAt(t, s, "step 1", "layer.11.attention.context")
	assert.Equal(t, 2*(cs336Small.Layers-1)+3, pv.sizes[ss])
	assert.Equal(t, div.live, pv.live, "the probabilities took the place of the difference")
	// The encoder's hand-written attention has its padding mask and dropout.
	e := Spec{Model: tiny, Batch: 2, SeqLen: 32, Steps: 1, Attention: Manual}
	sum := generate(t, e)
	for _, site := range []string{"layer.0.attention.mask", "layer.0.attention.softmax.exp", "layer.0.attention.dropout.mask"} {
		assert.NotEqual(t, -1, firstOrNone(sum, site), site)
	}
}

func firstOrNone(sum *summary, site string) int {
	if i, ok := sum.first[site]; ok {
		return i
	}
	return -1
}

func TestCompileLowersPeakAndKeepsWeightCopies(t *testing.T) {
	s := Spec{Model: cs336Small, Batch: 16, SeqLen: 96, Steps: 1, Precision: BF16, Attention: Manual, Optimizer: SGD}
	eager := generate(t, s)
	s.Compile = true
	comp := generate(t, s)
	assert.Less(t, comp.peakLive, eager.peakLive)
	// The 16-bit weight copies are matmul inputs of the backward: the
	// partitioner saves them, as eager autocast's cache and saved slots
	// keep them. At the end of the forward all are live in both.
	at := snapshotAt(t, s, "step 1", "loss.grad")
	s.Compile = false
	ea := snapshotAt(t, s, "step 1", "loss.grad")
	w := uint64(cs336Small.Hidden * cs336Small.Hidden * 2)
	assert.Equal(t, 4*cs336Small.Layers, at.sizes[w], "compiled: 4 saved 16-bit H x H weights per layer")
	assert.Equal(t, 4*cs336Small.Layers, ea.sizes[w], "eager: 4 cached 16-bit H x H weights per layer")
	// No RMSNorm or SiLU intermediates are saved: T x I tensors are the
	// w1, w3 outputs and the gated product (3 per layer; eager keeps 5).
	// (At b16 s96 a 16-bit T x I tensor has the size of an fp32 H x I
	// weight, three of which each layer has.)
	ti := uint64(16 * 96 * cs336Small.Intermediate * 2)
	weights := 3 * cs336Small.Layers
	assert.Equal(t, 3*cs336Small.Layers, at.sizes[ti]-weights)
	assert.Equal(t, 5*cs336Small.Layers, ea.sizes[ti]-weights)
}

// The estimate's documented 20% bound holds for the program switches too,
// on decoder LMs of the CS336 shapes.
func TestEstimateWithinBoundWithSwitches(t *testing.T) {
	lm := cs336Small
	lm.MaxPositions = 512
	var worst float64
	for _, b := range []int{4, 16} {
		for _, sl := range []int{128, 512} {
			for _, v := range []func(*Spec){
				func(s *Spec) { s.Attention = Manual },
				func(s *Spec) { s.Attention = Manual; s.Precision = BF16 },
				func(s *Spec) { s.KeepGrads = true },
				func(s *Spec) { s.Attention, s.KeepGrads = Manual, true },
				func(s *Spec) { s.Compile = true },
				func(s *Spec) { s.Compile, s.Precision = true, BF16 },
			} {
				s := Spec{Model: lm, Batch: b, SeqLen: sl, Steps: 2, EvalBatches: 1}
				v(&s)
				peak, e := peakOf(t, s), s.Estimate()
				gap := float64(e.PeakBytes)/float64(peak) - 1
				worst = max(worst, gap, -gap)
				t.Logf("%-45s peak %6.0f MiB estimate %6.0f MiB %+6.1f%%", s, mib(peak), mib(e.PeakBytes), 100*gap)
				assert.InDelta(t, 0, gap, tolEstimate, "%s", s)
			}
		}
	}
	t.Logf("worst |estimate/peak - 1| = %.3f", worst)
}

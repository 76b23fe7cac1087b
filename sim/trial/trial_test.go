package trial

import (
	"hash/fnv"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

func model(t testing.TB, name string) Model {
	m, err := LookupModel(name)
	require.NoError(t, err)
	return m
}

func generate(t testing.TB, s Spec) *summary {
	r, err := s.Reader()
	require.NoError(t, err)
	sum, err := summarize(r)
	require.NoError(t, err)
	return sum
}

// tiny is a small custom encoder for tests that only need the mechanics.
var tiny = Model{Name: "tiny", Layers: 2, Hidden: 64, Heads: 4, Intermediate: 256, Vocab: 1000, MaxPositions: 128, TypeVocab: 2}

func TestParamCountsMatchHuggingFace(t *testing.T) {
	// Sequence-classification models with 2 labels, as
	// sum(p.numel() for p in model.parameters()) reports them.
	want := map[string]uint64{
		"bert-base":        109483778,
		"bert-large":       335143938,
		"roberta-base":     124647170,
		"roberta-large":    355361794,
		"deberta-v3-base":  184423682,
		"deberta-v3-large": 435063810,
		"xlm-roberta-base": 278045186,
	}
	for _, m := range Models() {
		w, ok := want[m.Name]
		require.True(t, ok, m.Name)
		assert.InEpsilon(t, float64(w), float64(m.Params()), 0.005, "%s: %d params", m.Name, m.Params())
	}
}

func TestLookupModel(t *testing.T) {
	m, err := LookupModel("bert-base-uncased")
	require.NoError(t, err)
	assert.Equal(t, "bert-base", m.Name)
	_, err = LookupModel("gpt-5")
	require.ErrorContains(t, err, `unknown model "gpt-5"`)
}

// specs covers every switch of the model.
func specs(t testing.TB) []Spec {
	bb, dv := model(t, "bert-base"), model(t, "deberta-v3-base")
	return []Spec{
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 2},
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 2, Precision: FP16, GradAccum: 2},
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 3, Precision: BF16, GradientCheckpointing: true, EvalEvery: 2},
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 2, Attention: SDPA, Optimizer: AdamWFused},
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 2, Optimizer: SGD, DynamicPadding: true, Seed: 7},
		{Model: model(t, "roberta-base"), Batch: 2, SeqLen: 32, Steps: 2, Optimizer: AdamWLoop},
		{Model: dv, Batch: 2, SeqLen: 64, Steps: 2, Precision: FP16, GradientCheckpointing: true},
		{Model: dv, Batch: 2, SeqLen: 64, Steps: 2, GradAccum: 3},
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 2, Precision: BF16, GradientCheckpointing: true},
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 2, Attention: SDPA},
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 3, Precision: BF16, Attention: Manual, KeepGrads: true, Optimizer: AdamWLoop},
		{Model: bb, Batch: 4, SeqLen: 64, Steps: 2, Precision: FP16, Attention: Manual, GradAccum: 2, KeepGrads: true},
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 2, Precision: FP16, Compile: true, Attention: Manual, EvalEvery: 1},
		{Model: cs336Small, Batch: 2, SeqLen: 64, Steps: 2, Compile: true, Attention: SDPA, KeepGrads: true, DynamicPadding: true},
	}
}

func TestEveryAllocFreedAndFreesNameLiveBlocks(t *testing.T) {
	for _, s := range specs(t) {
		t.Run(s.String(), func(t *testing.T) {
			sum := generate(t, s)
			assert.Empty(t, sum.problems, "double or unknown frees")
			assert.Zero(t, sum.finalLive, "bytes left at trial_end")
			assert.Zero(t, sum.liveBlocks, "blocks left at trial_end")
			assert.Equal(t, sum.allocs, sum.frees)
			assert.Zero(t, sum.timeBackwards, "TimeUS went backwards")
			assert.Equal(t, s.Duration(), time.Duration(sum.lastTime)*time.Microsecond, "trial_end time is Duration")
		})
	}
}

func TestTrialFraming(t *testing.T) {
	s := Spec{Model: tiny, Batch: 2, SeqLen: 16, Steps: 3, EvalEvery: 2, EvalBatches: 2}
	r, err := s.Reader()
	require.NoError(t, err)
	h := r.Header()
	assert.Equal(t, Source, h.Source)
	require.Len(t, h.Devices, 1)
	assert.EqualValues(t, 0, h.Devices[0].Index)
	tr, err := trace.ReadAll(r)
	require.NoError(t, err)
	ev := tr.Events
	require.NotEmpty(t, ev)
	assert.Equal(t, trace.ActionTrialStart, ev[0].Action)
	assert.Equal(t, s.String(), ev[0].Label)
	assert.EqualValues(t, 0, ev[0].TimeUS)
	assert.Equal(t, trace.ActionTrialEnd, ev[len(ev)-1].Action)
	var markers []string
	for _, e := range ev {
		assert.EqualValues(t, 0, e.Device)
		assert.EqualValues(t, 0, e.Stream)
		if e.Action == trace.ActionMarker {
			markers = append(markers, e.Label)
		}
	}
	// EvalEvery 2 over 3 steps: one pass after step 2, none at the end.
	assert.Equal(t, []string{"step 1", "step 2", "eval after step 2", "step 3"}, markers)

	s.EvalEvery = 0 // once at the end
	sum := generate(t, s)
	assert.Equal(t, []string{"step 1", "step 2", "step 3", "eval after step 3"}, sum.markers)
}

func digest(t testing.TB, s Spec) uint64 {
	r, err := s.Reader()
	require.NoError(t, err)
	h := fnv.New64a()
	var e trace.Event
	var b [8]byte
	for {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		for _, v := range []uint64{uint64(e.Action), e.Addr, e.Size, uint64(e.TimeUS), uint64(e.Stack)} {
			for i := range b {
				b[i] = byte(v >> (8 * i))
			}
			h.Write(b[:])
		}
		h.Write([]byte(e.Label))
	}
	return h.Sum64()
}

func TestDeterministic(t *testing.T) {
	for _, s := range specs(t) {
		assert.Equal(t, digest(t, s), digest(t, s), "%s: same spec, same events", s)
	}
	s := Spec{Model: model(t, "bert-base"), Batch: 4, SeqLen: 64, Steps: 3, DynamicPadding: true, Seed: 1}
	assert.Equal(t, digest(t, s), digest(t, s), "same spec, same events")
	s2 := s
	s2.Seed = 2
	assert.NotEqual(t, digest(t, s), digest(t, s2), "dynamic padding: the seed draws the lengths")
	s.DynamicPadding, s2.DynamicPadding = false, false
	assert.Equal(t, digest(t, s), digest(t, s2), "fixed padding: the seed changes nothing")
}

func TestDynamicPaddingLengths(t *testing.T) {
	sc := newSchedule(Spec{Model: tiny, Batch: 1, SeqLen: 100, DynamicPadding: true, Seed: 3})
	seen := map[int]bool{}
	for i := 0; i < 200; i++ {
		n := sc.seqLen()
		require.True(t, n >= 50 && n <= 100, "length %d", n)
		require.True(t, n%8 == 0 || n == 100, "length %d not padded to 8", n)
		seen[n] = true
	}
	assert.Greater(t, len(seen), 4)
}

// firstOf is the first event index whose site name has the prefix (or
// contains the infix when the pattern starts with '*').
func firstOf(sum *summary, pat string) int {
	best := math.MaxInt
	for site, i := range sum.first {
		ok := strings.HasPrefix(site, pat)
		if pat[0] == '*' {
			ok = strings.Contains(site, pat[1:])
		}
		if ok && i < best {
			best = i
		}
	}
	return best
}

func TestOrderInvariants(t *testing.T) {
	s := Spec{Model: model(t, "bert-base"), Batch: 2, SeqLen: 32, Steps: 2}
	sum := generate(t, s)
	backward := firstOf(sum, "loss.grad")
	grads := firstOf(sum, "*grad.")
	state := firstOf(sum, "*optimizer.exp_avg")
	require.NotEqual(t, math.MaxInt, grads)
	require.NotEqual(t, math.MaxInt, state)
	assert.Greater(t, grads, backward, "parameter gradients appear in the first backward")
	assert.Greater(t, state, grads, "optimizer state appears at the first step, after the gradients")
	assert.Greater(t, state, firstOf(sum, "clip_grad_norm"), "clipping runs before the step")

	// Lazily created, once: one exp_avg and one exp_avg_sq per parameter.
	r, err := s.Reader()
	require.NoError(t, err)
	tr, err := trace.ReadAll(r)
	require.NoError(t, err)
	count := map[string]int{}
	for _, e := range tr.Events {
		if e.Action != trace.ActionAlloc {
			continue
		}
		name := tr.Stacks.Frames(e.Stack)[0].Name
		switch {
		case strings.HasSuffix(name, "optimizer.exp_avg"):
			count["exp_avg"]++
		case strings.HasSuffix(name, "optimizer.exp_avg_sq"):
			count["exp_avg_sq"]++
		case strings.Contains(name, "grad.") && !strings.HasPrefix(name, "loss"):
			count["grad"]++
		}
	}
	n := len(s.Model.params())
	assert.Equal(t, n, count["exp_avg"])
	assert.Equal(t, n, count["exp_avg_sq"])
	assert.Equal(t, 2*n, count["grad"], "zero_grad(set_to_none) frees the gradients: reallocated every step")
}

func peakOf(t testing.TB, s Spec) uint64 { return generate(t, s).peakLive }

func TestCheckpointingLowersPeak(t *testing.T) {
	for _, name := range []string{"bert-large", "deberta-v3-base"} {
		s := Spec{Model: model(t, name), Batch: 32, SeqLen: 512, Steps: 1}
		plain := peakOf(t, s)
		s.GradientCheckpointing = true
		ck := peakOf(t, s)
		assert.Less(t, ck, plain*2/3, "%s: checkpointing %d vs %d", name, ck, plain)
	}
	d := Spec{Model: cs336Small, Batch: 32, SeqLen: 128, Steps: 1}
	plain := peakOf(t, d)
	d.GradientCheckpointing = true
	assert.Less(t, peakOf(t, d), plain)
}

func TestAMP(t *testing.T) {
	bl := model(t, "bert-large")
	s32 := Spec{Model: bl, Batch: 16, SeqLen: 384, Steps: 1}
	s16 := s32
	s16.Precision = FP16
	sb := s32
	sb.Precision = BF16
	p32, p16 := generate(t, s32), generate(t, s16)
	assert.Less(t, p16.peakLive, p32.peakLive, "AMP saves 16-bit activations")
	assert.Greater(t, p16.peakLive, p32.peakLive/2, "but weights, grads and state stay fp32")
	has := func(sum *summary, pat string) bool { return firstOf(sum, pat) != math.MaxInt }
	assert.True(t, has(p16, "*autocast"), "16-bit weight copies")
	assert.False(t, has(p32, "*autocast"))
	assert.True(t, has(p16, "scaler."), "fp16 has GradScaler")
	assert.False(t, has(generate(t, sb), "scaler."), "bf16 has none")
	assert.Less(t, s16.Duration(), s32.Duration(), "tensor cores are faster")
}

func TestSDPAHasNoSeqSquaredTensors(t *testing.T) {
	s := Spec{Model: model(t, "roberta-base"), Batch: 32, SeqLen: 512, Steps: 1}
	eager := generate(t, s)
	s.Attention = SDPA
	sd := generate(t, s)
	assert.NotEqual(t, math.MaxInt, firstOf(eager, "*attention.probs"))
	assert.Equal(t, math.MaxInt, firstOf(sd, "*attention.probs"))
	assert.Less(t, sd.peakLive, eager.peakLive)
}

func TestOptimizerPeaks(t *testing.T) {
	// Small activations: the peak is the optimizer step. foreach AdamW
	// holds a parameter-sized sqrt buffer per group at once; fused none.
	bb := model(t, "bert-base")
	s := Spec{Model: bb, Batch: 1, SeqLen: 16, Steps: 1, Optimizer: AdamW}
	N := bb.Params()
	foreach := peakOf(t, s)
	s.Optimizer = AdamWFused
	fused := peakOf(t, s)
	s.Optimizer = SGD
	sgd := peakOf(t, s)
	assert.Greater(t, foreach, 19*N, "weights+grads+m+v+sqrt of the decay group")
	assert.Less(t, fused, foreach)
	assert.GreaterOrEqual(t, fused, 16*N)
	assert.Less(t, sgd, 9*N)
}

func TestDuration(t *testing.T) {
	s := Spec{Model: model(t, "bert-base"), Batch: 16, SeqLen: 128, Steps: 10}
	d10 := s.Duration()
	s.Steps = 20
	d20 := s.Duration()
	assert.Greater(t, d20, d10)
	assert.Less(t, d20, 2*d10+time.Second)
	// A training micro-batch is 6 x params x tokens plus attention: for
	// bert-base b16 s128 at 20 TFLOP/s that is about 70 ms.
	us := s.phaseUS(phase{kind: phMicro, seq: 128})
	assert.InDelta(t, 6*float64(s.Model.matmulParams())*16*128/20e6, us, 0.2*us)
	s.GradientCheckpointing = true
	assert.Greater(t, s.Duration(), d20)
	assert.Zero(t, Spec{}.Duration(), "an invalid spec has no duration")
}

// The documented bound of Estimate against the generated peak
// (docs/trial-model.md): within 20% either way over the seeds' grid.
const tolEstimate = 0.20

func TestEstimateWithinBound(t *testing.T) {
	names := []string{"bert-base", "bert-large", "roberta-large", "deberta-v3-base", "xlm-roberta-base"}
	if testing.Short() || raceEnabled {
		names = names[:2]
	}
	var worst float64
	for _, name := range names {
		m := model(t, name)
		for _, b := range []int{8, 32} {
			for _, sl := range []int{128, 384} {
				for _, v := range []func(*Spec){
					func(*Spec) {},
					func(s *Spec) { s.Precision = FP16 },
					func(s *Spec) { s.GradientCheckpointing = true },
					func(s *Spec) { s.Attention = SDPA },
				} {
					s := Spec{Model: m, Batch: b, SeqLen: sl, Steps: 2, EvalBatches: 1} // step 2: the steady state, optimizer state live
					v(&s)
					if s.Validate() != nil {
						continue
					}
					peak := peakOf(t, s)
					e := s.Estimate()
					require.Equal(t, e.PeakBytes, e.WeightsBytes+e.GradBytes+e.OptimizerBytes+e.ActivationBytes)
					gap := float64(e.PeakBytes)/float64(peak) - 1
					worst = math.Max(worst, math.Abs(gap))
					t.Logf("%-40s peak %6.0f MiB estimate %6.0f MiB %+6.1f%%", s, mib(peak), mib(e.PeakBytes), 100*gap)
					assert.InDelta(t, 0, gap, tolEstimate, "%s: estimate %d, generated peak %d", s, e.PeakBytes, peak)
				}
			}
		}
	}
	t.Logf("worst |estimate/peak - 1| = %.3f", worst)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func TestValidate(t *testing.T) {
	bb := model(t, "bert-base")
	ok := Spec{Model: bb, Batch: 8, SeqLen: 128}
	require.NoError(t, ok.Validate())
	for _, c := range []struct {
		mut  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Batch = 0 }, "batch must be positive"},
		{func(s *Spec) { s.SeqLen = -1 }, "sequence length must be positive"},
		{func(s *Spec) { s.SeqLen = 1024 }, "exceeds bert-base's 512 positions"},
		{func(s *Spec) { s.Precision = "fp8" }, `unknown precision "fp8"`},
		{func(s *Spec) { s.Optimizer = "adafactor" }, `unknown optimizer "adafactor"`},
		{func(s *Spec) { s.Attention = "flash3" }, `unknown attention "flash3"`},
		{func(s *Spec) { s.Steps = -2 }, "must not be negative"},
		{func(s *Spec) { s.Model.Heads = 7 }, "not a multiple of heads"},
		{func(s *Spec) { s.Model.Layers = 0 }, "layers must be positive"},
		{func(s *Spec) { s.Model.Arch = "rnn" }, `unknown arch "rnn"`},
		{func(s *Spec) { s.Model = model(t, "deberta-v3-base"); s.Attention = SDPA }, "no sdpa attention"},
		{func(s *Spec) { s.Model = model(t, "deberta-v3-base"); s.Attention = Manual }, "no manual attention"},
		{func(s *Spec) { s.Compile = true }, "compile is modelled for decoder-lm only"},
		{func(s *Spec) { s.Model = cs336Small; s.Compile, s.GradientCheckpointing = true, true }, "compile with gradient checkpointing"},
		{func(s *Spec) { s.Model.Vocab = 1 << 23 }, "out of range"},
		{func(s *Spec) { s.Batch = 60000; s.Model.MaxPositions = 0; s.SeqLen = 100000 }, "too large"},
	} {
		s := ok
		c.mut(&s)
		err := s.Validate()
		require.Error(t, err, c.want)
		assert.Contains(t, err.Error(), c.want)
		_, rerr := s.Reader()
		assert.Error(t, rerr)
	}
}

func TestString(t *testing.T) {
	s := Spec{Model: model(t, "bert-base"), Batch: 32, SeqLen: 128, Precision: FP16}
	assert.Equal(t, "bert-base b32 s128 fp16", s.String())
	s.GradAccum, s.GradientCheckpointing, s.Optimizer = 4, true, SGD
	assert.Equal(t, "bert-base b32 s128 fp16 ga4 ckpt sgd", s.String())
	s.Attention, s.KeepGrads = Manual, true
	assert.Equal(t, "bert-base b32 s128 fp16 ga4 ckpt sgd manual keepgrads", s.String())
	d := Spec{Model: cs336Small, Batch: 4, SeqLen: 128, Compile: true}
	assert.Equal(t, "cs336-small b4 s128 fp32 compile", d.String())
	assert.Equal(t, "custom-L2-H64 b1 s8 fp32", Spec{Model: Model{Layers: 2, Hidden: 64}, Batch: 1, SeqLen: 8}.String())
}

// TestBoundedMemory reads a 10k-step trial: the reader's state (stacks,
// buffers, tape) does not grow with the steps, and neither does the heap.
func TestBoundedMemory(t *testing.T) {
	steps := 10000
	if raceEnabled {
		steps = 2000
	}
	s := Spec{Model: Model{Name: "micro", Layers: 2, Hidden: 32, Heads: 2, Intermediate: 64, Vocab: 100, MaxPositions: 16, TypeVocab: 2},
		Batch: 2, SeqLen: 16, Steps: steps, EvalEvery: 100, EvalBatches: 2}
	tr, err := s.Reader()
	require.NoError(t, err)
	r := tr.(*reader)
	var e trace.Event
	type state struct {
		stacks, bufCap, tape, live int
		heap                       uint64
	}
	snap := func() state {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return state{len(r.g.sites), cap(r.g.buf), len(r.g.tape), r.g.live, ms.HeapAlloc}
	}
	var at []state
	for n := 0; ; n++ {
		if err := r.Next(&e); err == io.EOF {
			break
		}
		if e.Action == trace.ActionMarker && (e.Label == "step 1000" || e.Label == fmtStep(steps)) {
			at = append(at, snap())
		}
	}
	require.Len(t, at, 2)
	a, b := at[0], at[1]
	assert.Equal(t, a.stacks, b.stacks)
	assert.Equal(t, a.bufCap, b.bufCap)
	assert.Equal(t, a.tape, b.tape)
	assert.Equal(t, a.live, b.live)
	assert.Less(t, float64(b.heap), float64(a.heap)+(1<<20), "heap grew from %d to %d", a.heap, b.heap)
}

func fmtStep(n int) string { return "step " + itoa(n) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestReplaysOnTheAllocator drives the caching allocator with a trial: it
// fits a 24 GiB device, and a large one runs out on a small device.
func TestReplaysOnTheAllocator(t *testing.T) {
	s := Spec{Model: model(t, "bert-base"), Batch: 16, SeqLen: 128, Steps: 2, Precision: FP16}
	r, err := s.Reader()
	require.NoError(t, err)
	res, err := replay.Run(r, replay.Options{Name: s.String(), Capacity: 24 << 30})
	require.NoError(t, err)
	assert.Empty(t, res.OOMs)
	assert.Empty(t, res.Problems)
	st := res.Devices[0].Stats
	assert.Zero(t, st.AllocatedBytes[0].Current, "everything freed")
	assert.InEpsilon(t, float64(peakOf(t, s)), float64(st.RequestedBytes[0].Peak), 0.001, "the allocator saw the same peak")

	big := Spec{Model: model(t, "bert-large"), Batch: 32, SeqLen: 384, Steps: 1}
	r, err = big.Reader()
	require.NoError(t, err)
	res, err = replay.Run(r, replay.Options{Name: big.String(), Capacity: 8 << 30})
	require.NoError(t, err)
	require.NotEmpty(t, res.OOMs, "bert-large b32 s384 fp32 does not fit 8 GiB")
}

func FuzzSpec(f *testing.F) {
	f.Add(2, 64, 4, 256, 100, 2, 16, 1, 1, 0, 0, false, false, 0, false, false)
	f.Add(1, 8, 1, 8, 10, 1, 1, 2, 2, 1, 2, true, true, 2, true, true)
	f.Fuzz(func(t *testing.T, layers, hidden, heads, inter, vocab, batch, seq, ga, steps, prec, arch int, ckpt, dyn bool, attn int, keep, comp bool) {
		m := Model{Name: "fuzz", Arch: []Arch{Encoder, DeBERTa, DecoderLM, "bad"}[abs(arch)%4],
			Layers: layers % 4, Hidden: hidden % 96, Heads: heads % 5, Intermediate: inter % 200, Vocab: vocab % 300,
			MaxPositions: 64, TypeVocab: 2, PositionBuckets: 8}
		s := Spec{Model: m, Batch: batch % 5, SeqLen: seq % 70, GradAccum: ga % 3, Steps: steps % 3,
			Precision: []Precision{FP32, FP16, BF16, "x"}[abs(prec)%4], GradientCheckpointing: ckpt, DynamicPadding: dyn, EvalBatches: 1,
			Attention: []string{Eager, SDPA, Manual, "x"}[abs(attn)%4], KeepGrads: keep, Compile: comp}
		if s.Validate() != nil {
			_, err := s.Reader()
			require.Error(t, err)
			return
		}
		sum := generate(t, s)
		require.Empty(t, sum.problems)
		require.Zero(t, sum.liveBlocks)
		require.Zero(t, sum.timeBackwards)
	})
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func BenchmarkReader(b *testing.B) {
	s := Spec{Model: model(b, "bert-base"), Batch: 16, SeqLen: 128, Steps: 5, Precision: FP16}
	var events int64
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := s.Reader()
		require.NoError(b, err)
		var e trace.Event
		for r.Next(&e) == nil {
			events++
		}
		r.(*reader).Release() // as sim/workers does
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

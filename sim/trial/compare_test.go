package trial

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// The comparison of the model with real PyTorch traces (docs/trial-model.md,
// "How close"). The shared CS336 traces are real transformer LM steps
// recorded with torch.cuda.memory._record_memory_history; each case names
// the custom Model shape deduced from the trace's sizes (see the doc) and
// the window of the generated trial that corresponds to the recording.

// window is what one recording (or the matching stretch of a generated
// trial) allocated: the peak of live requested bytes, the live bytes when
// it began, and the allocations by power-of-two size bucket.
type window struct {
	startLive, peakLive uint64
	allocs              int
	allocBytes          uint64
	count               [65]int
	bytes               [65]uint64
}

func (w *window) add(size uint64) {
	k := bits.Len64(size)
	w.count[k]++
	w.bytes[k] += size
	w.allocs++
	w.allocBytes += size
}

// realWindow reads a partial PyTorch trace. Its live bytes before the first
// event are the final state's allocated (requested) bytes minus the
// trace's net allocation; stop, when set, ends the window at the first
// event it accepts.
func realWindow(t *testing.T, path string, stop func(fr []trace.Frame) bool) *window {
	o, err := trace.Open(path)
	require.NoError(t, err)
	r := o.Reader
	defer r.Close()
	w := &window{}
	var cum, maxCum, total int64
	var e trace.Event
	stopped := false
	for {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if !stopped && stop != nil && e.Action == trace.ActionAlloc && stop(r.Stacks().Frames(e.Stack)) {
			stopped = true
		}
		switch e.Action {
		case trace.ActionAlloc:
			total += int64(e.Size)
			if !stopped {
				cum += int64(e.Size)
				w.add(e.Size)
			}
		case trace.ActionFreeRequested:
			total -= int64(e.Size)
			if !stopped {
				cum -= int64(e.Size)
			}
		}
		if !stopped && cum > maxCum {
			maxCum = cum
		}
	}
	fin, ok := r.Final()
	require.True(t, ok, "%s has no final state", path)
	var finLive uint64
	for _, s := range fin {
		for _, b := range s.Blocks {
			if b.State == trace.BlockAllocated {
				finLive += b.RequestedSize
			}
		}
	}
	w.startLive = uint64(int64(finLive) - total)
	w.peakLive = uint64(int64(w.startLive) + maxCum)
	return w
}

// modelWindow runs a generated trial and measures the stretch from the
// marker named start to the first event that stop accepts (or the next
// marker).
func modelWindow(t *testing.T, s Spec, start string, stop func(site string) bool) *window {
	r, err := s.Reader()
	require.NoError(t, err)
	w := &window{}
	var cur uint64
	live := map[uint64]uint64{}
	in, done := false, false
	var e trace.Event
	for !done {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if e.Action == trace.ActionMarker {
			if in {
				break
			}
			if e.Label == start {
				in, w.startLive, w.peakLive = true, cur, cur
			}
			continue
		}
		site := ""
		if fr := r.Stacks().Frames(e.Stack); len(fr) > 0 {
			site = fr[0].Name
		}
		if in && stop != nil && e.Action == trace.ActionAlloc && stop(site) {
			break
		}
		switch e.Action {
		case trace.ActionAlloc:
			live[e.Addr] = e.Size
			cur += e.Size
			if in {
				w.add(e.Size)
			}
		case trace.ActionFreeRequested:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		}
		if in && cur > w.peakLive {
			w.peakLive = cur
		}
	}
	require.True(t, in, "marker %q not found", start)
	return w
}

// bucketDistance is half the L1 distance between the two windows' byte
// distributions over buckets: the share of allocated bytes that would have
// to move to another power-of-two bucket (0: same shape, 1: disjoint).
func bucketDistance(a, b *window) float64 {
	var d float64
	for k := range a.bytes {
		pa, pb := 0.0, 0.0
		if a.allocBytes > 0 {
			pa = float64(a.bytes[k]) / float64(a.allocBytes)
		}
		if b.allocBytes > 0 {
			pb = float64(b.bytes[k]) / float64(b.allocBytes)
		}
		d += math.Abs(pa - pb)
	}
	return d / 2
}

// CS336 shapes deduced from the traces (docs/trial-model.md).
var (
	cs336Medium = Model{Name: "cs336-medium", Arch: DecoderLM, Layers: 24, Hidden: 1024, Heads: 16, Intermediate: 4096, Vocab: 10000, MaxPositions: 128}
	cs336Small  = Model{Name: "cs336-small", Arch: DecoderLM, Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072, Vocab: 10000, MaxPositions: 128}
)

func sharedTrace(t *testing.T, name string) string {
	p := filepath.Join("..", "..", "..", "shared", "traces", "pytorch", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real trace %s not present (../shared is outside the repository): %v", p, err)
	}
	return p
}

func isOptimizerStep(fr []trace.Frame) bool {
	for _, f := range fr {
		if f.Name == "step" && strings.HasSuffix(f.Filename, "optimizer.py") {
			return true
		}
	}
	return false
}

func isOptimizerSite(site string) bool {
	return strings.HasPrefix(site, "clip_grad_norm") || strings.Contains(site, "optimizer.")
}

// The tolerances docs/trial-model.md states.
const (
	tolPeakLive    = 0.05 // |model/real - 1| of peak live bytes, every comparison
	tolActivations = 0.35 // of the activation peak (peak - live at start), inference forward
	tolDistance    = 0.35 // bucketDistance
)

type comparison struct {
	name        string
	real, model *window
	activations bool // also compare peak - start (inference)
}

func TestRealTraces(t *testing.T) {
	train := sharedTrace(t, "cs336_wedsonlin_medium_128_training.pickle")
	fwd32 := sharedTrace(t, "cs336_silmont2000_memory_forward_fp32_128.pickle")
	fwd16 := sharedTrace(t, "cs336_silmont2000_memory_forward_bf16_128.pickle")
	infer := sharedTrace(t, "cs336_wedsonlin_medium_128_inference.pickle")
	// The programs write attention by hand (cs336_basics' softmax: max,
	// subtract, exp, sum, divide); the training one uses the course's
	// AdamW, a loop over the parameters.
	medium := Spec{Model: cs336Medium, Batch: 4, SeqLen: 128, Steps: 2, Optimizer: AdamWLoop, Attention: Manual}
	// An inference forward is the model's evaluation batch (no_grad); with
	// SGD no optimizer state is live then, so its live bytes are the
	// weights, as in the recordings.
	small := Spec{Model: cs336Small, Batch: 4, SeqLen: 128, Steps: 1, EvalBatches: 1, Attention: Manual, Optimizer: SGD}
	small16 := small
	small16.Precision = BF16
	mediumInfer := small
	mediumInfer.Model = cs336Medium
	cases := []comparison{
		{name: "medium training step (fwd+bwd+AdamW)", real: realWindow(t, train, nil), model: modelWindow(t, medium, "step 2", nil)},
		{name: "medium training fwd+bwd only", real: realWindow(t, train, isOptimizerStep), model: modelWindow(t, medium, "step 2", isOptimizerSite)},
		{name: "small inference forward fp32", real: realWindow(t, fwd32, nil), model: modelWindow(t, small, "eval after step 1", nil), activations: true},
		{name: "small inference forward bf16", real: realWindow(t, fwd16, nil), model: modelWindow(t, small16, "eval after step 1", nil), activations: true},
		{name: "medium inference forward fp32", real: realWindow(t, infer, nil), model: modelWindow(t, mediumInfer, "eval after step 1", nil), activations: true},
	}
	for _, c := range cases {
		ratio := float64(c.model.peakLive) / float64(c.real.peakLive)
		dist := bucketDistance(c.real, c.model)
		t.Logf("%s: peak live real %d model %d (%+.1f%%); allocs real %d model %d; bytes allocated real %d model %d; bucket distance %.3f",
			c.name, c.real.peakLive, c.model.peakLive, 100*(ratio-1), c.real.allocs, c.model.allocs, c.real.allocBytes, c.model.allocBytes, dist)
		require.InDelta(t, 1, ratio, tolPeakLive, "%s: peak live off by more than the documented tolerance", c.name)
		if c.activations {
			ra, ma := c.real.peakLive-c.real.startLive, c.model.peakLive-c.model.startLive
			aratio := float64(ma) / float64(ra)
			t.Logf("%s: activation peak real %d model %d (%+.1f%%)", c.name, ra, ma, 100*(aratio-1))
			require.InDelta(t, 1, aratio, tolActivations, "%s: activation peak off by more than the documented tolerance", c.name)
		}
		var rows []string
		for k := range c.real.count {
			if c.real.count[k]+c.model.count[k] == 0 {
				continue
			}
			rows = append(rows, fmt.Sprintf("  [2^%d,2^%d) real %5d %12d  model %5d %12d", k-1, k, c.real.count[k], c.real.bytes[k], c.model.count[k], c.model.bytes[k]))
		}
		t.Log("\n" + strings.Join(rows, "\n"))
		require.LessOrEqual(t, dist, tolDistance, "%s: size histogram further than the documented tolerance", c.name)
	}
}

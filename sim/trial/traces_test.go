package trial

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// TestCommittedTraces regenerates traces/trial/*.mrt from the specs their
// README commands give and requires the same events: the README stays
// true, and a change to the model that changes them must regenerate the
// files (and bump ModelVersion).
func TestCommittedTraces(t *testing.T) {
	m := func(n string) Model { return model(t, n) }
	cases := map[string]Spec{
		"bert-base_b16_s128_fp16.mrt":           {Model: m("bert-base"), Batch: 16, SeqLen: 128, Precision: FP16, Steps: 3, EvalBatches: 2, Seed: 1},
		"roberta-large_b8_s256_fp32.mrt":        {Model: m("roberta-large"), Batch: 8, SeqLen: 256, Precision: FP32, Steps: 2, EvalBatches: 2, Seed: 1},
		"deberta-v3-base_b8_s256_bf16_ckpt.mrt": {Model: m("deberta-v3-base"), Batch: 8, SeqLen: 256, Precision: BF16, GradientCheckpointing: true, Steps: 2, EvalBatches: 2, Seed: 1},
		"cs336-medium_b4_s128_fp32.mrt": {Model: Model{Name: "cs336-medium", Arch: DecoderLM, Layers: 24, Hidden: 1024, Heads: 16, Intermediate: 4096,
			Vocab: 10000, MaxPositions: 128, Labels: 2}, Batch: 4, SeqLen: 128, Optimizer: AdamWLoop, Steps: 2, EvalBatches: 1, Seed: 1},
	}
	for file, s := range cases {
		t.Run(file, func(t *testing.T) {
			o, err := trace.Open(filepath.Join("..", "..", "traces", "trial", file))
			require.NoError(t, err)
			defer o.Close()
			got := o.Reader
			want, err := s.Reader()
			require.NoError(t, err)
			require.Equal(t, Source, got.Header().Source)
			var a, b trace.Event
			for i := 0; ; i++ {
				errA, errB := want.Next(&a), got.Next(&b)
				if errA == io.EOF {
					require.Equal(t, io.EOF, errB, "the file has more events than the model at %d", i)
					break
				}
				require.NoError(t, errA)
				require.NoError(t, errB, "event %d", i)
				require.Equal(t, a.Action, b.Action, "event %d", i)
				require.Equal(t, a.Addr, b.Addr, "event %d", i)
				require.Equal(t, a.Size, b.Size, "event %d", i)
				require.Equal(t, a.TimeUS, b.TimeUS, "event %d", i)
				require.Equal(t, a.Label, b.Label, "event %d", i)
				require.Equal(t, want.Stacks().Frames(a.Stack), got.Stacks().Frames(b.Stack), "event %d", i)
			}
		})
	}
}

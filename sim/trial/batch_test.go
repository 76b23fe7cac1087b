package trial

import (
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// TestNextBatchReadsWhatNextReads reads trials with Next alone and again
// with NextBatch and Next mixed at random, and wants the same events in the
// same order, no empty batch, and io.EOF from both at the end.
func TestNextBatchReadsWhatNextReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, name := range []string{"bert-base", "deberta-v3-base"} {
		m, err := LookupModel(name)
		require.NoError(t, err)
		s := Spec{Model: m, Batch: 4, SeqLen: 64, Steps: 2, Precision: FP16, GradientCheckpointing: name != "bert-base"}
		var want []trace.Event
		rd, err := s.Reader()
		require.NoError(t, err)
		for {
			var e trace.Event
			if err := rd.Next(&e); err == io.EOF {
				break
			} else {
				require.NoError(t, err)
			}
			want = append(want, e)
		}
		rd.Close()

		rd, err = s.Reader()
		require.NoError(t, err)
		br := rd.(interface {
			NextBatch() ([]trace.Event, error)
		})
		var got []trace.Event
		batches := 0
		for {
			if rng.IntN(3) == 0 {
				var e trace.Event
				err := rd.Next(&e)
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				got = append(got, e)
				continue
			}
			b, err := br.NextBatch()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			require.NotEmpty(t, b)
			got = append(got, b...)
			batches++
		}
		_, err = br.NextBatch()
		require.Equal(t, io.EOF, err)
		require.Equal(t, want, got, name)
		require.Greater(t, batches, 5, name)
	}
}

package replay_test

import (
	"io"
	"testing"

	"github.com/memreplay/memreplay/trace"
)

// BenchmarkDecode1MBatch is BenchmarkDecode1M through NextBatch, as the
// replay reads.
func BenchmarkDecode1MBatch(b *testing.B) {
	evs := make([]trace.Event, 128)
	benchDecode(b, func(r trace.Reader) (int64, error) {
		br := r.(trace.BatchReader)
		var k int64
		for {
			m, err := br.NextBatch(evs)
			if err == io.EOF {
				return k, nil
			}
			if err != nil {
				return k, err
			}
			k += int64(m)
		}
	})
}

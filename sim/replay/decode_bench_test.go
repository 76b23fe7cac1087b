package replay_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/memreplay/memreplay/trace"
)

// BenchmarkDecode1M reads BenchmarkReplay1M's trace through the native
// decoder alone, one Next call per event: the decoder's share of a replay,
// in CPU time as the replay benchmarks report it.
func BenchmarkDecode1M(b *testing.B) {
	benchDecode(b, func(r trace.Reader) (int64, error) {
		var e trace.Event
		var k int64
		for {
			err := r.Next(&e)
			if err == io.EOF {
				return k, nil
			}
			if err != nil {
				return k, err
			}
			k++
		}
	})
}

func benchDecode(b *testing.B, read func(trace.Reader) (int64, error)) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "train.mrt")
	writeTrainingTrace(b, path, n)
	b.ResetTimer()
	cpu0 := processCPU()
	var events int64
	for i := 0; i < b.N; i++ {
		r, f := openNative(b, path)
		k, err := read(r)
		if err != nil {
			b.Fatal(err)
		}
		events += k
		r.Close()
		f.Close()
	}
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(events)/cpu.Seconds(), "cpu-events/s")
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// openNative opens the native trace at path for one benchmark pass; the
// caller closes the reader and the file.
func openNative(tb testing.TB, path string) (trace.Reader, *os.File) {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := trace.NewNativeReader(f, path)
	if err != nil {
		tb.Fatal(err)
	}
	return r, f
}

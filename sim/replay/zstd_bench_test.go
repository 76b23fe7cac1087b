package replay_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// BenchmarkZstdOfReplay1M decompresses the body of BenchmarkReplay1M's
// trace, recompressed at each zstd level the library offers, on the
// calling goroutine as the replay's reader does at -cpu 1: what zstd's
// share of a replayed event is, and whether another encoder level would
// shrink it (it does not). zstd's time follows its sequences (a match and
// the literals before it), not the uncompressed bytes: version 1's
// records, each with its own jittery time delta, cost about one sequence
// an event (9-10 ns); version 2's times records leave long matches (about
// 2.5 ns an event, at the same 8.8 bytes an event; docs/performance.md,
// "Issue 19: the native decoder's share of a replayed event").
func BenchmarkZstdOfReplay1M(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "train.mrt")
	writeTrainingTrace(b, path, n)
	file, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	start := bytes.Index(file, []byte{0x28, 0xb5, 0x2f, 0xfd}) // zstd's frame magic, after the native header
	zr, err := zstd.NewReader(bytes.NewReader(file[start:]))
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	zr.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, lv := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		var body bytes.Buffer
		zw, _ := zstd.NewWriter(&body, zstd.WithEncoderLevel(lv), zstd.WithEncoderCRC(true), zstd.WithWindowSize(2<<20))
		if _, err := zw.Write(raw); err != nil {
			b.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			b.Fatal(err)
		}
		b.Run(lv.String(), func(b *testing.B) {
			buf := make([]byte, 64<<10)
			for b.Loop() {
				d, err := zstd.NewReader(bytes.NewReader(body.Bytes()), zstd.WithDecoderMaxWindow(64<<20), zstd.WithDecoderConcurrency(1))
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for {
					k, err := d.Read(buf)
					got += k
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				d.Close()
				if got != len(raw) {
					b.Fatalf("decompressed %d bytes, want %d", got, len(raw))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
			b.ReportMetric(float64(len(raw))/n, "raw-bytes/event")
			b.ReportMetric(float64(body.Len())/n, "file-bytes/event")
		})
	}
}

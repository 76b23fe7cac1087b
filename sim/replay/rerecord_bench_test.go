package replay_test

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// benchRecordedReplay is benchReplay with a ReplayRecorder attached:
// streaming the native format to a file (what `replay --record OUT.mrt`
// does) or keeping the recording in memory (--record OUT.pickle, before the
// pickle is written).
func benchRecordedReplay(b *testing.B, n int, inMemory bool) {
	dir := b.TempDir()
	path := filepath.Join(dir, "train.mrt")
	writeTrainingTrace(b, path, n)
	b.ResetTimer()
	var events, recorded int64
	var heap uint64
	var size int64
	for i := 0; i < b.N; i++ {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := trace.NewNativeReader(f, path)
		if err != nil {
			b.Fatal(err)
		}
		var rr *replay.ReplayRecorder
		var out *os.File
		var bw *bufio.Writer
		if inMemory {
			rr = replay.NewReplayRecorder(r, replay.ReplayRecordOptions{Name: path})
		} else {
			if out, err = os.Create(filepath.Join(dir, "rec.mrt")); err != nil {
				b.Fatal(err)
			}
			bw = bufio.NewWriterSize(out, 1<<20)
			rr = replay.NewReplayRecorderTo(bw, r, replay.ReplayRecordOptions{Name: path})
		}
		res, err := replay.Run(r, replay.Options{Recorder: rr})
		if err != nil {
			b.Fatal(err)
		}
		if err := rr.Finish(); err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapInuse)
		if out != nil {
			if err := bw.Flush(); err != nil {
				b.Fatal(err)
			}
			st, _ := out.Stat()
			size = st.Size()
			out.Close()
		}
		events += res.Events
		recorded += rr.Events()
		f.Close()
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(recorded)/float64(events), "recorded/event")
	if size > 0 {
		b.ReportMetric(float64(size)/float64(n), "out-bytes/event")
	}
}

// BenchmarkReplay1MRecorded and BenchmarkReplay1MRecordedInMemory measure
// `replay --record` on the trace of BenchmarkReplay1M (docs/replay.md,
// "Recording the replay").
func BenchmarkReplay1MRecorded(b *testing.B)         { benchRecordedReplay(b, 1_000_000, false) }
func BenchmarkReplay1MRecordedInMemory(b *testing.B) { benchRecordedReplay(b, 1_000_000, true) }

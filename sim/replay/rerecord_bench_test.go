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

// How a benchmark records the replay.
type recordMode int

const (
	recordNative         recordMode = iota // native format streamed to a file: `replay --record OUT.mrt`
	recordInMemory                         // the recording kept in memory (NewReplayRecorder)
	recordPickleInMemory                   // kept in memory, then trace.WritePyTorch to a file: --record OUT.pickle until the spool
	recordPickle                           // spooled, the pickle written at Finish: `replay --record OUT.pickle`
)

// benchRecordedReplay is benchReplay with a ReplayRecorder attached, in
// one of the modes above; the time includes writing the output.
func benchRecordedReplay(b *testing.B, n int, mode recordMode) {
	dir := b.TempDir()
	path := filepath.Join(dir, "train.mrt")
	writeTrainingTrace(b, path, n)
	b.ResetTimer()
	var events, recorded int64
	var heap uint64
	var size int64
	for i := 0; i < b.N; i++ {
		r, f := openNative(b, path)
		var rr *replay.ReplayRecorder
		var out *os.File
		var bw *bufio.Writer
		var err error
		if mode != recordInMemory {
			if out, err = os.Create(filepath.Join(dir, "rec.out")); err != nil {
				b.Fatal(err)
			}
			bw = bufio.NewWriterSize(out, 1<<20)
		}
		o := replay.ReplayRecordOptions{Name: path}
		switch mode {
		case recordNative:
			rr = replay.NewReplayRecorderTo(bw, r, o)
		case recordInMemory, recordPickleInMemory:
			rr = replay.NewReplayRecorder(r, o)
		case recordPickle:
			if rr, err = replay.NewReplayRecorderPyTorch(bw, dir, r, o); err != nil {
				b.Fatal(err)
			}
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
		if mode == recordPickleInMemory {
			if err := trace.WritePyTorch(bw, rr.Trace()); err != nil {
				b.Fatal(err)
			}
		}
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

// BenchmarkReplay1MRecorded, ...InMemory, ...Pickle and ...PickleInMemory
// measure `replay --record` on the trace of BenchmarkReplay1M
// (docs/replay.md, "Recording the replay"): PickleInMemory is how
// --record OUT.pickle worked before the spool, Pickle how it works now.
func BenchmarkReplay1MRecorded(b *testing.B) { benchRecordedReplay(b, 1_000_000, recordNative) }
func BenchmarkReplay1MRecordedInMemory(b *testing.B) {
	benchRecordedReplay(b, 1_000_000, recordInMemory)
}
func BenchmarkReplay1MRecordedPickle(b *testing.B) { benchRecordedReplay(b, 1_000_000, recordPickle) }
func BenchmarkReplay1MRecordedPickleInMemory(b *testing.B) {
	benchRecordedReplay(b, 1_000_000, recordPickleInMemory)
}

package profiler_test

import (
	"path/filepath"
	"testing"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// realSnapshots are the real PyTorch snapshots beside the repository
// (../shared/traces/pytorch) and in its traces/pytorch.
func realSnapshots(b *testing.B) []string {
	var paths []string
	for _, dir := range []string{"../../shared/traces/pytorch", "../traces/pytorch"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		b.Skip("no real snapshots in ../shared/traces/pytorch or traces/pytorch")
	}
	return paths
}

// BenchmarkRealSnapshots is what `memreplay report` does on every real
// snapshot, without rendering: import, replay with the profiler, Finish.
// Its CPU profile (docs/performance.md) says how the time divides between
// the pickle import, the replay and Finish's site table (frame trimming).
func BenchmarkRealSnapshots(b *testing.B) {
	paths := realSnapshots(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, path := range paths {
			tr, err := trace.ReadPyTorchFile(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := replay.Prepare(tr); err != nil {
				b.Fatal(err)
			}
			p := profiler.New(tr.Stacks, profiler.Options{ExpectedEvents: int64(len(tr.Events))})
			if _, err := replay.Run(tr.NewReader(), replay.Options{Name: path, Recorder: p}); err != nil {
				b.Fatal(err)
			}
			p.Finish()
		}
	}
}

// BenchmarkRealSnapshotsOpened is the same corpus the way the CLI opens
// it now (replay.OpenPrepared: the snapshot streamed into packed events,
// the reconstruction's walk on a second goroutine during the import, the
// replay read from the packed events). BenchmarkRealSnapshots keeps the
// older path (ReadPyTorchFile + Prepare), which every commit has, so that
// bench/corpus.sh can compare across commits; this one shows what a user's
// `memreplay report` costs.
func BenchmarkRealSnapshotsOpened(b *testing.B) {
	paths := realSnapshots(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, path := range paths {
			o, _, err := replay.OpenPrepared(path)
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			if o.Packed != nil {
				n = o.Packed.Events.Len()
			}
			p := profiler.New(o.Reader.Stacks(), profiler.Options{ExpectedEvents: n})
			if _, err := replay.Run(o.Reader, replay.Options{Name: path, Recorder: p}); err != nil {
				b.Fatal(err)
			}
			p.Finish()
			o.Close()
		}
	}
}

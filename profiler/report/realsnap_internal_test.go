package report

import (
	"encoding/json"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
)

// realSnapshotPaths are the real PyTorch snapshots beside the repository
// (../shared/traces/pytorch) and in its traces/pytorch.
func realSnapshotPaths(tb testing.TB) []string {
	var paths []string
	for _, dir := range []string{"../../../shared/traces/pytorch", "../../traces/pytorch"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		tb.Skip("no real snapshots in ../shared/traces/pytorch or traces/pytorch")
	}
	return paths
}

// realInput replays one snapshot as `memreplay report` does: opened with
// OpenPrepared, the profiler keeping the page's timeline and peak detail,
// every site listed; conf nil: the recorded settings.
func realInput(tb testing.TB, path string, conf *config.Config) *Input {
	o, _, err := replay.OpenPrepared(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer o.Close()
	var n int64
	if o.Packed != nil {
		n = o.Packed.Events.Len()
	}
	p := profiler.New(o.Reader.Stacks(), profiler.Options{ExpectedEvents: n, MaxSamples: HTMLTimelineSamples,
		DetailEvents: HTMLDetailEvents})
	res, err := replay.Run(o.Reader, replay.Options{Name: path, Recorder: p, Config: conf})
	if err != nil {
		tb.Fatal(err)
	}
	in := &Input{Trace: o.Reader.Header(), Result: res, Profile: p.Finish(), Stacks: o.Reader.Stacks(), Top: math.MaxInt}
	in.Trace.SourceFile = path
	return in
}

// BenchmarkRealSnapshotsHTML is the page of every real snapshot, as
// `memreplay report` writes it, from replays made before the loop: the
// data document and the page, nothing of the import or the replay.
func BenchmarkRealSnapshotsHTML(b *testing.B) {
	var pages []*HTMLReport
	for _, path := range realSnapshotPaths(b) {
		pages = append(pages, &HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: realInput(b, path, nil)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range pages {
			if err := WriteHTML(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRealSnapshotsReport is `memreplay report` on every real
// snapshot in one process: open, replay with the profiler, Finish and the
// page, without the process's start and the output file.
func BenchmarkRealSnapshotsReport(b *testing.B) {
	paths := realSnapshotPaths(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, path := range paths {
			r := &HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: realInput(b, path, nil)}}}
			if err := WriteHTML(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRealSnapshotsData is the page's data document of every real
// snapshot, made by json.Marshal (what the page used before) and by the
// hand-written encoder, from documents built before the loop.
func BenchmarkRealSnapshotsData(b *testing.B) {
	var docs []*htmlData
	for _, path := range realSnapshotPaths(b) {
		d, err := buildHTMLData(&HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: realInput(b, path, nil)}}})
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, d)
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				if _, err := json.Marshal(d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				if err := writeData(io.Discard, d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

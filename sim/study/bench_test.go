package study

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkStudy is a 40-trial study of the seeds' space at PAR 4 with the
// trial model's default 10 steps, in memory (no state file): the cost of
// answering "what would this study do" per trial simulated.
func BenchmarkStudy(b *testing.B) {
	o := Options{Space: BERTFamilySpace(), Trials: 40, Workers: 4, Seed: 1, Capacity: 24 << 30,
		Policy: Policy{PruneOnOOM: true, RestartOnError: true, OOMCorrupts: 0.5}}
	var events int64
	for b.Loop() {
		res, err := Run(o)
		if err != nil {
			b.Fatal(err)
		}
		events = res.Summary.Events
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/40/1e6, "ms/trial")
	b.ReportMetric(float64(events), "events/study")
}

// BenchmarkStudyStateFile is the same study written to a state file, one
// fsync per trial.
func BenchmarkStudyStateFile(b *testing.B) {
	o := Options{Space: BERTFamilySpace(), Trials: 40, Workers: 4, Seed: 1, Capacity: 24 << 30,
		Policy: Policy{PruneOnOOM: true, RestartOnError: true, OOMCorrupts: 0.5}}
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		o.State = filepath.Join(dir, fmt.Sprintf("%d.jsonl", i))
		if _, err := Run(o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/40/1e6, "ms/trial")
}

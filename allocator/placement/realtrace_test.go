package placement

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// realProblems reads the placement problems of the real traces
// (testdata/NOTICE.md).
func realProblems(tb testing.TB) ([]string, map[string][]Buffer) {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.csv.gz")
	require.NoError(tb, err)
	require.NotEmpty(tb, files)
	var names []string
	out := map[string][]Buffer{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(tb, err)
		zr, err := gzip.NewReader(fh)
		require.NoError(tb, err)
		bufs, _, err := ReadCSV(zr, f)
		require.NoError(tb, err)
		fh.Close()
		name := strings.TrimSuffix(filepath.Base(f), ".csv.gz")
		names, out[name] = append(names, name), bufs
	}
	return names, out
}

// The goal of docs/plan.md: on every real trace, the heuristics alone
// place the blocks within 2% of the live bytes, and the search proves the
// live bytes reachable (the training trace's search takes seconds: it
// runs in BenchmarkSolve and bench/plan.sh, not here).
func TestRealTraceProblems(t *testing.T) {
	names, probs := realProblems(t)
	for _, name := range names {
		bufs := probs[name]
		for _, opts := range []Options{{NodeLimit: -1}, {}} {
			if opts.NodeLimit == 0 && len(bufs) > 2000 {
				continue
			}
			sol, err := Solve(bufs, opts)
			require.NoError(t, err, name)
			peak, err := Verify(bufs, sol.Offsets)
			require.NoError(t, err, name)
			require.Equal(t, sol.Peak, peak, name)
			require.GreaterOrEqual(t, sol.Peak, sol.LowerBound, name)
			require.LessOrEqual(t, float64(sol.Peak), 1.02*float64(sol.LowerBound), name)
			if opts.NodeLimit == 0 {
				require.True(t, sol.Optimal, name)
				require.Equal(t, sol.LowerBound, sol.Peak, name)
			}
		}
	}
}

// BenchmarkSolve: the heuristics (what a planner pays per step), the
// whole solve with the default budget, and the search's cost per node, on
// each real trace's problem.
func BenchmarkSolve(b *testing.B) {
	names, probs := realProblems(b)
	for _, name := range names {
		bufs := probs[name]
		b.Run("heuristics/"+name, func(b *testing.B) {
			var sol Solution
			for b.Loop() {
				sol, _ = Solve(bufs, Options{NodeLimit: -1})
			}
			b.ReportMetric(float64(len(bufs)), "buffers")
			b.ReportMetric(float64(sol.Peak)/float64(sol.LowerBound), "peak/bound")
		})
	}
	for _, name := range names {
		bufs := probs[name]
		b.Run("solve/"+name, func(b *testing.B) {
			var sol Solution
			for b.Loop() {
				sol, _ = Solve(bufs, Options{})
			}
			b.ReportMetric(float64(sol.Peak)/float64(sol.LowerBound), "peak/bound")
			b.ReportMetric(float64(sol.Nodes), "nodes")
		})
	}
	for _, name := range names {
		bufs := probs[name]
		b.Run("search/"+name, func(b *testing.B) {
			start := time.Now()
			Solve(bufs, Options{NodeLimit: -1})
			heur := time.Since(start)
			var nodes int64
			var el time.Duration
			for b.Loop() {
				start := time.Now()
				sol, _ := Solve(bufs, Options{NodeLimit: 2000})
				el += time.Since(start) - heur
				nodes += sol.Nodes
			}
			if nodes > 0 { // 0: the heuristics were optimal
				b.ReportMetric(float64(el.Nanoseconds())/float64(nodes), "ns/node")
			}
		})
	}
}

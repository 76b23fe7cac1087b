package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay/speculate"
	"github.com/memreplay/memreplay/trace"
)

// speculateAll makes speculate.OpenReplay speculate on every snapshot (on) or
// on none.
func speculateAll(t *testing.T, on bool) {
	old, oldProcs := speculate.MinBytes, speculate.MinProcs
	speculate.MinBytes, speculate.MinProcs = math.MaxInt64, 1
	if on {
		speculate.MinBytes = 0
	}
	t.Cleanup(func() { speculate.MinBytes, speculate.MinProcs = old, oldProcs })
}

// The commands that replay a snapshot while it is imported write what
// they wrote when they replayed it after: replay (json, table, --check)
// and report's page, byte for byte, on a snapshot recorded from the start
// (the speculative replay kept), one recorded from the start under other
// settings and one that begins mid-run (discarded and replayed again).
func TestSpeculativeReplaySameOutput(t *testing.T) {
	dir := t.TempDir()
	fromStart := filepath.Join(dir, "start.pickle")
	code, _, stderr := runCLI("replay", "--record", fromStart, "../../traces/trial/bert-base_b16_s128_fp16.mrt")
	require.Zero(t, code, stderr)
	other := filepath.Join(dir, "other.pickle")
	code, _, stderr = runCLI("replay", "--alloc-conf", "max_split_size_mb:64", "--record", other, "../../traces/trial/bert-base_b16_s128_fp16.mrt")
	require.Zero(t, code, stderr)
	// With external_annotations: kept beside the events, they no longer
	// restart the import's observer, so the speculative replay stands
	// (it was Discarded), and its profile gets them all the same.
	annotated := filepath.Join(dir, "annotated.pickle")
	tr, err := trace.ReadPyTorchFile(fromStart)
	require.NoError(t, err)
	first, last := tr.Events[0].TimeUS, tr.Events[len(tr.Events)-1].TimeUS
	for i := range 40 {
		stage := []string{"START", "END"}[i%2]
		tr.Annotations = append(tr.Annotations, trace.Annotation{Name: "Optimizer.step#AdamW.step", Stage: stage, TimeUS: first + (last-first)*int64(i)/40})
	}
	require.NoError(t, trace.WritePyTorchFile(annotated, tr))
	for _, c := range []struct {
		path string
		want speculate.Outcome
	}{{fromStart, speculate.Confirmed}, {annotated, speculate.Confirmed}, {completeTrace, speculate.Confirmed}, {other, speculate.Discarded}, {partialTrace, speculate.Discarded}} {
		for _, args := range [][]string{
			{"replay", "--format", "json", c.path},
			{"replay", c.path},
			{"replay", "--check", "--format", "json", c.path},
			{"replay", "--lenient", "--format", "json", c.path},
			{"replay", "--alloc-conf", "expandable_segments:True", "--format", "json", c.path},
			{"report", "-o", "PAGE", c.path},
		} {
			var outs [2]string
			for k, on := range []bool{false, true} {
				speculateAll(t, on)
				a := append([]string(nil), args...)
				page := filepath.Join(dir, "page.html")
				if a[0] == "report" {
					a[2] = page
				}
				code, stdout, stderr := runCLI(a...)
				require.Zero(t, code, "%v: %s", a, stderr)
				outs[k] = stdout
				if a[0] == "report" {
					b, err := os.ReadFile(page)
					require.NoError(t, err)
					outs[k] = string(b)
				}
				want := speculate.NotSpeculated
				switch {
				case on && a[1] == "--alloc-conf" && c.path == other:
					want = speculate.Confirmed // its own settings replaced
				case on && a[1] != "--lenient":
					want = c.want
				}
				require.Equal(t, want, lastSpeculation, "%v", a)
			}
			require.Equal(t, outs[0], outs[1], "%v", args)
			if c.path == annotated && args[0] == "replay" && args[1] == "--format" {
				require.Contains(t, outs[1], `"label": "Optimizer.step#AdamW.step"`)
			}
		}
	}
}

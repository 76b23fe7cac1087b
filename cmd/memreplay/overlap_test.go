package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
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
// they wrote when they replayed it after: replay (json, table, --check,
// and the recording of --record, a pickle's recorded beside the import
// too) and report's page, byte for byte, on a snapshot recorded from the
// start (the speculative replay kept), one recorded from the start under
// other settings and one that begins mid-run (discarded and replayed
// again).
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
			{"replay", "--format", "json", "--record", "REC.pickle", c.path},
			{"replay", "--oom", "skip", "--record", "REC.pickle", c.path},
			{"replay", "--alloc-conf", "expandable_segments:True", "--record", "REC.pickle", c.path},
			{"replay", "--format", "json", "--record", "REC.mrt", c.path},
		} {
			var outs [2]string
			for k, on := range []bool{false, true} {
				speculateAll(t, on)
				a := append([]string(nil), args...)
				page := filepath.Join(dir, "page.html")
				if a[0] == "report" {
					a[2] = page
				}
				rec := ""
				for i := range a {
					if strings.HasPrefix(a[i], "REC.") {
						rec = filepath.Join(dir, fmt.Sprintf("rec%d", k)+strings.TrimPrefix(a[i], "REC"))
						a[i] = rec
					}
				}
				code, stdout, stderr := runCLI(a...)
				require.Zero(t, code, "%v: %s", a, stderr)
				outs[k] = stdout
				if a[0] == "report" {
					b, err := os.ReadFile(page)
					require.NoError(t, err)
					outs[k] = string(b)
				}
				if rec != "" {
					b, err := os.ReadFile(rec)
					require.NoError(t, err)
					outs[k] += string(b)
					// The path is in the message: the rest is the same.
					outs[k] += strings.ReplaceAll(stderr, rec, "REC")
				}
				want := speculate.NotSpeculated
				switch {
				case on && strings.HasSuffix(rec, ".mrt"):
					// A native recording needs the frames as it goes.
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

// A speculative replay discarded leaves nothing of its recording: no
// temporary file beside OUT, its spool closed (the spool is unlinked at
// once, so only an open descriptor would show it); the kept one is OUT.
func TestSpeculativeRecordDiscardedLeavesNothing(t *testing.T) {
	speculateAll(t, true)
	for _, c := range []struct {
		path string
		want speculate.Outcome
	}{{partialTrace, speculate.Discarded}, {completeTrace, speculate.Confirmed}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out.pickle")
		code, _, stderr := runCLI("replay", "--record", out, c.path)
		require.Zero(t, code, stderr)
		require.Equal(t, c.want, lastSpeculation)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{"out.pickle"}, names)
		_, err = trace.ReadPyTorchFile(out)
		require.NoError(t, err)
		require.Empty(t, openSpools(t), "a recording's spool left open")
	}
}

// openSpools lists this process's open files that are recording spools.
func openSpools(t *testing.T) []string {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var spools []string
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.Contains(l, ".memreplay-spool-") {
			spools = append(spools, l)
		}
	}
	return spools
}

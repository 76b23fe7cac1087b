package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler/report"
)

// reportCLI calls reportCmd directly (main.go registers it).
func reportCLI(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := reportCmd(args, &out, &errb)
	return out.String(), errb.String(), err
}

// runs counts the runs embedded in a page.
func pageRuns(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, `<script type="application/json" id="memreplay-data">`)
	return len(regexp.MustCompile(`"label":"[^"]*","report":`).FindAllString(page, -1))
}

func TestReportCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.html")
	stdout, stderr, err := reportCLI(partialTrace, "--alloc-conf", "expandable_segments:True", "--no-color", "-o", out)
	require.NoError(t, err, stderr)
	assert.Equal(t, "wrote "+out+" (2 runs)\n", stdout)
	assert.Equal(t, 2, pageRuns(t, out))
	b, _ := os.ReadFile(out)
	assert.Contains(t, string(b), "cs336_silmont2000_memory_forward_fp32_128.pickle")

	// Two traces, recorded settings only: labels name the files.
	out2 := filepath.Join(t.TempDir(), "two.html")
	_, stderr, err = reportCLI(partialTrace, completeTrace, "-o", out2)
	require.NoError(t, err, stderr)
	assert.Equal(t, 2, pageRuns(t, out2))
	b, _ = os.ReadFile(out2)
	assert.Contains(t, string(b), "cs336_silmont2000_mem_snapshot.pickle · recorded settings")
}

func TestReportCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	var ue usageError
	for _, args := range [][]string{
		{"-o", filepath.Join(dir, "x.html")}, // no trace
		{partialTrace},                       // no -o
		{partialTrace, "-o", "x.html", "--alloc-conf", "bogus:1"}, // bad setting
		{partialTrace, "-o", "x.html", "--no-recorded"},           // nothing to replay
		{partialTrace, "-o", "x.html", "--capacity", "lots"},      // bad size
		{partialTrace, "-o", "x.html", "--frobnicate"},            // unknown flag
	} {
		_, _, err := reportCLI(args...)
		require.Error(t, err, "%v", args)
		assert.True(t, errors.As(err, &ue), "%v: %v is a usage error", args, err)
	}
	_, _, err := reportCLI(filepath.Join(dir, "missing.pickle"), "-o", filepath.Join(dir, "x.html"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.pickle")
	_, statErr := os.Stat(filepath.Join(dir, "x.html"))
	assert.True(t, os.IsNotExist(statErr), "no page for a failed replay")

	_, _, err = reportCLI(partialTrace, "-o", filepath.Join(dir, "no", "such", "dir", "x.html"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "x.html")
}

func TestReplayAndCompareHTML(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "replay.html")
	code, stdout, stderr := runCLI("replay", "--html", one, "--no-color", partialTrace)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "peak live", "the table still prints")
	assert.Equal(t, 1, pageRuns(t, one))

	cmp := filepath.Join(dir, "compare.html")
	code, stdout, stderr = runCLI("compare", partialTrace, "--alloc-conf", "expandable_segments:True", "--html", cmp)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "expandable_segments:True")
	assert.Equal(t, 2, pageRuns(t, cmp))
	b, _ := os.ReadFile(cmp)
	assert.True(t, strings.Contains(string(b), `"label":"recorded settings"`))
}

// TestReportSVG renders the page in Chromium and writes the charts.
func TestReportSVG(t *testing.T) {
	if _, err := report.FindChromium(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	dir := t.TempDir()
	stdout, stderr, err := reportCLI(partialTrace, "-o", filepath.Join(dir, "r.html"), "--svg", filepath.Join(dir, "img"))
	if err != nil && strings.Contains(stderr, report.ErrBrowserCrashed.Error()) {
		t.Skipf("skipped: Chromium kept crashing on start-up on this machine: %s", stderr)
	}
	require.NoError(t, err, stderr)
	for _, name := range []string{"timeline-0", "segments-0"} {
		p := filepath.Join(dir, "img", name+".svg")
		assert.Contains(t, stdout, "wrote "+p)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(b), `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<svg xmlns="http://www.w3.org/2000/svg"`))
		assert.Contains(t, string(b), `class="series"`)
	}
}

// A page that cannot be written leaves the old file as it was and no
// temporary file beside it.
func TestWriteHTMLFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.html")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	bad := &report.HTMLReport{PAR: &report.PARSection{Settings: []string{"a"}, K: []int{1},
		POOM: [][]float64{{2}}, Throughput: [][]float64{{1}}}} // P(OOM) 2 is refused
	require.Error(t, writeHTML(path, bad))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "old", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinySpace writes a search space of a two-layer model, small enough that
// a PAR search on a 1 GiB GPU runs in a moment (under -race too).
func tinySpace(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"name": "tiny",
	  "models": [{"name": "tiny", "layers": 2, "hidden": 128, "heads": 2, "intermediate": 512,
	              "vocab": 30522, "max_positions": 512}],
	  "choices": {"batch_sizes": [8, 32, 64], "seq_lens": [128, 512]},
	  "steps": 2, "eval_batches": 1}`), 0o644))
	return path
}

// quickPar runs the tiny space in the file space.
func quickPar(space string, extra ...string) []string {
	return append([]string{"--space", space, "--capacity", "1GiB", "--context-overhead", "100MiB",
		"--max-par", "3", "--mixes", "4", "--trials-per-worker", "2"}, extra...)
}

func TestParBERTFamilySpace(t *testing.T) {
	// The default workload, as small as it goes: one mix of one trial.
	var out, errb bytes.Buffer
	require.NoError(t, parCmd([]string{"--max-par", "1", "--mixes", "1", "--trials-per-worker", "1", "--steps", "1",
		"--alloc-conf", "expandable_segments:True"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "the BERT-family study's search space, 1 steps per trial")
	assert.Contains(t, out.String(), "alloc-conf expandable_segments:True")
}

func TestParJSON(t *testing.T) {
	var out, errb bytes.Buffer
	require.NoError(t, parCmd(quickPar(tinySpace(t), "--format", "json"), &out, &errb), errb.String())
	var rep struct {
		Capacity uint64 `json:"capacity_bytes"`
		Source   string `json:"source"`
		Settings []struct {
			Conf string `json:"alloc_conf"`
			Rows []struct {
				PAR    int `json:"par"`
				Trials int `json:"trials"`
			} `json:"rows"`
		} `json:"settings"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, uint64(1<<30), rep.Capacity)
	assert.Contains(t, rep.Source, "tiny.json")
	require.Len(t, rep.Settings, 2)
	assert.Equal(t, "", rep.Settings[0].Conf)
	assert.Equal(t, "expandable_segments:True", rep.Settings[1].Conf)
	for _, s := range rep.Settings {
		require.Len(t, s.Rows, 3)
		for k, row := range s.Rows {
			assert.Equal(t, k+1, row.PAR)
			assert.Equal(t, 4*2*(k+1), row.Trials)
		}
	}
}

func TestParSameSeedSameOutput(t *testing.T) {
	space := tinySpace(t)
	run := func(extra ...string) string {
		var out, errb bytes.Buffer
		args := quickPar(space, append([]string{"--max-par", "2"}, extra...)...)
		require.NoError(t, parCmd(args, &out, &errb), errb.String())
		return out.String()
	}
	a := run("--format", "markdown", "--parallel", "1")
	assert.Equal(t, a, run("--format", "markdown", "--parallel", "2"))
	assert.NotEqual(t, a, run("--format", "markdown", "--seed", "9"))
	assert.Contains(t, a, "### alloc-conf expandable_segments:True")
}

func TestParTraceFiles(t *testing.T) {
	dir := "../../traces/pytorch"
	files, err := filepath.Glob(filepath.Join(dir, "*.pickle"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out, errb bytes.Buffer
	args := append([]string{"--capacity", "3GiB", "--max-par", "3", "--mixes", "4", "--alloc-conf", "", "--alloc-conf", "expandable_segments:True"}, files...)
	require.NoError(t, parCmd(args, &out, &errb), errb.String())
	s := out.String()
	assert.Contains(t, s, "2 trials from")
	assert.Contains(t, s, "safe PAR at 90% confidence")
	assert.Contains(t, s, "naive estimate")
	// The partial trace's blocks live before its first event are noted.
	assert.Contains(t, errb.String(), "live before the first event")
}

func TestParBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.mrt")
	require.NoError(t, os.WriteFile(junk, []byte("not a trace"), 0o644))
	for name, args := range map[string][]string{
		"format":        {"--format", "xml"},
		"confidence":    {"--confidence", "1.5"},
		"capacity":      {"--capacity", "lots"},
		"context":       {"--capacity", "1GiB", "--context-overhead", "2GiB"},
		"alloc-conf":    {"--alloc-conf", "expandable_segments:Maybe"},
		"max-par":       {"--max-par", "0"},
		"mixes":         {"--mixes", "-1"},
		"share":         {"--trial-share", "0"},
		"flag":          {"--no-such-flag"},
		"space missing": {"--space", filepath.Join(dir, "nope.json")},
		"space + trace": {"--space", "x.json", junk},
		"missing trace": {filepath.Join(dir, "nope.pickle")},
		"junk trace":    {junk},
		"limits traces": {"--limits", "2", junk},
		"limits-space":  {"--limits-space", filepath.Join(dir, "l.json")},
		"limits range":  {"--limits", "-1"},
	} {
		var out, errb bytes.Buffer
		err := parCmd(args, &out, &errb)
		require.Error(t, err, name)
		assert.Equal(t, 2, parExitCode(err), "%s: %v", name, err)
		assert.NotContains(t, err.Error(), "\n", name)
	}
}

// parExitCode is what main's run returns for err.
func parExitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.Is(err, errCheckFailed):
		return 1
	}
	return 2
}

// --html writes the PAR page with the same figures the JSON report has:
// one P(OOM) and one throughput per setting and PAR, and the saturation
// level where the JSON says OOMs began.
func TestParHTML(t *testing.T) {
	space := tinySpace(t)
	page := filepath.Join(t.TempDir(), "par.html")
	var out, errb bytes.Buffer
	require.NoError(t, parCmd(quickPar(space, "--format", "json", "--html", page), &out, &errb), errb.String())
	var rep struct {
		MaxPAR   int `json:"max_par"`
		Settings []struct {
			NoOOM int `json:"no_oom_par"`
			Rows  []struct {
				POOM float64 `json:"p_oom"`
				TPH  float64 `json:"trials_per_hour"`
			} `json:"rows"`
		} `json:"settings"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	const open = `<script type="application/json" id="memreplay-data">`
	s := string(b)
	i := strings.Index(s, open)
	require.GreaterOrEqual(t, i, 0)
	s = s[i+len(open):]
	s = s[:strings.Index(s, "</script>")]
	var data struct {
		PAR struct {
			Settings   []string     `json:"settings"`
			K          []int        `json:"k"`
			POOM       [][]*float64 `json:"p_oom"`
			Throughput [][]*float64 `json:"throughput"`
			Saturation []int        `json:"saturation"`
		} `json:"par"`
	}
	require.NoError(t, json.Unmarshal([]byte(s), &data))
	require.Equal(t, []string{"(PyTorch defaults)", "expandable_segments:True"}, data.PAR.Settings)
	require.Equal(t, []int{1, 2, 3}, data.PAR.K)
	for i, set := range rep.Settings {
		for j, row := range set.Rows {
			require.NotNil(t, data.PAR.POOM[i][j])
			assert.InDelta(t, row.POOM, *data.PAR.POOM[i][j], 1e-9)
			assert.InDelta(t, row.TPH, *data.PAR.Throughput[i][j], 1e-6)
		}
		want := 0
		if set.NoOOM < rep.MaxPAR {
			want = set.NoOOM + 1
		}
		assert.Equal(t, want, data.PAR.Saturation[i])
	}
}

// --limits prints the peaks and limits and writes the limited space; par
// on that space finds the promised PAR safe.
func TestParLimitsKeepTheirPromise(t *testing.T) {
	space := tinySpace(t)
	lim := filepath.Join(t.TempDir(), "limited.json")
	var out, errb bytes.Buffer
	require.NoError(t, parCmd(quickPar(space, "--alloc-conf", "", "--limits", "3", "--limits-space", lim), &out, &errb), errb.String())
	for _, want := range []string{"tiny: peak reserved alone (GiB), batch x sequence length", "Model-aware limits for PAR 3", lim} {
		assert.Contains(t, out.String(), want)
	}
	out.Reset()
	require.NoError(t, parCmd([]string{"--space", lim, "--capacity", "1GiB", "--context-overhead", "100MiB",
		"--max-par", "3", "--mixes", "16", "--trials-per-worker", "2", "--alloc-conf", "", "--empty-cache", "--format", "json"}, &out, &errb), errb.String())
	var rep struct {
		Settings []struct {
			SafePAR int `json:"safe_par"`
		} `json:"settings"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, 3, rep.Settings[0].SafePAR)

	// The space as given is not safe at 3: the limits changed something.
	out.Reset()
	require.NoError(t, parCmd([]string{"--space", space, "--capacity", "1GiB", "--context-overhead", "100MiB",
		"--max-par", "3", "--mixes", "16", "--trials-per-worker", "2", "--alloc-conf", "", "--empty-cache", "--format", "json"}, &out, &errb), errb.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Less(t, rep.Settings[0].SafePAR, 3)
}

package study

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSpace is the seeds' space with short trials, so that a study of a
// few dozen trials runs in well under a second.
func testSpace() Space {
	s := BERTFamilySpace()
	s.Steps, s.EvalBatches = 2, 1
	return s
}

// baseOptions is the seeds' first setup, shrunk: PAR 4 on 24 GiB, OOMs
// pruned.
func baseOptions(trials int) Options {
	return Options{Space: testSpace(), Trials: trials, Workers: 4, Seed: 1, Capacity: 24 << 30,
		Policy: Policy{PruneOnOOM: true}}
}

func run(t *testing.T, o Options) (*Result, Report) {
	t.Helper()
	res, err := Run(o)
	require.NoError(t, err)
	rep := Summarize(res.State, res.Planned)
	// The report counts restarts from the trials' process numbers (so
	// that a killed run's count); for one whole run that is the engine's
	// count.
	require.Equal(t, res.Summary.Restarts, rep.Restarts)
	return res, rep
}

// strip clears what a resume legitimately changes in a record: the clock,
// the process count and the run number.
func strip(r Record) Record {
	r.StartUS, r.EndUS, r.Process, r.Run, r.DeviceTimeUS = 0, 0, 0, 0, 0
	return r
}

func byID(recs []Record) map[int]Record {
	m := map[int]Record{}
	for _, r := range recs {
		m[r.ID] = r
	}
	return m
}

func TestStudyIsDeterministic(t *testing.T) {
	n := trialsN(40)
	a, _ := run(t, baseOptions(n))
	b, _ := run(t, baseOptions(n))
	require.Equal(t, a.State.Records, b.State.Records)
	require.Len(t, a.State.Records, n)
	for _, r := range a.State.Records {
		sp, err := r.Spec.Spec()
		require.NoError(t, err)
		require.Equal(t, baseOptions(n).SpecFor(r.ID), sp, "trial %d's spec is a function of seed and id", r.ID)
	}
}

func TestGridSampler(t *testing.T) {
	o := baseOptions(12)
	o.Sampler = GridSampler
	res, _ := run(t, o)
	seen := map[string]bool{}
	for _, r := range res.State.Records {
		sp, err := r.Spec.Spec()
		require.NoError(t, err)
		require.Equal(t, o.SpecFor(r.ID), sp)
		require.False(t, seen[sp.String()+string(rune(sp.GradAccum))], "grid points are distinct")
		seen[sp.String()+string(rune(sp.GradAccum))] = true
	}
	o.Trials = o.Space.GridSize() + 1
	_, err := Run(o)
	require.ErrorContains(t, err, "the grid has only")
}

// TestResumeAfterKill kills a study after some trials (the engine stops at
// the error of the AfterRecord hook, as at a kill: nothing more is
// written), resumes it, and checks the final file: every trial exactly
// once, the lines written before the kill untouched, every spec what an
// uninterrupted study gave it.
func TestResumeAfterKill(t *testing.T) {
	n := trialsN(40)
	full, _ := run(t, baseOptions(n))

	path := filepath.Join(t.TempDir(), "study.jsonl")
	o := baseOptions(n)
	o.State = path
	killed := errors.New("killed")
	o.AfterRecord = func(r Record) error {
		if r.ID >= n/2 {
			return killed
		}
		return nil
	}
	_, err := Run(o)
	require.ErrorIs(t, err, killed)
	before, err := LoadState(path)
	require.NoError(t, err)
	k := len(before.Records)
	require.Greater(t, k, 0)
	require.Less(t, k, n)
	prefix, err := os.ReadFile(path)
	require.NoError(t, err)

	o.AfterRecord, o.Resume = nil, true
	res, err := Run(o)
	require.NoError(t, err)
	after, err := LoadState(path)
	require.NoError(t, err)
	require.Equal(t, res.State.Records, after.Records)
	require.Len(t, after.Records, n, "every trial is in the file")
	ids := map[int]int{}
	for _, r := range after.Records {
		ids[r.ID]++
	}
	for id := range n {
		require.Equal(t, 1, ids[id], "trial %d exactly once", id)
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, prefix), "the lines before the kill are untouched")
	require.Equal(t, full.State.Records[:k], after.Records[:k], "before the kill: the uninterrupted study's trials")
	fullByID := byID(full.State.Records)
	for _, r := range after.Records {
		require.Equal(t, fullByID[r.ID].Spec, r.Spec, "trial %d keeps its spec", r.ID)
	}
	require.Len(t, after.Resumes, 1)
	require.Equal(t, 2, Summarize(after, n).Runs)
	// The resumed run's clock continues where the killed one stopped.
	for _, r := range after.Records[k:] {
		require.GreaterOrEqual(t, r.StartUS, after.Resumes[0].AtUS)
	}
}

// TestResumeRepeatsTrialsWithoutHistory: with one worker and a fresh
// process per trial no trial depends on what ran before it, so a killed and
// resumed study gives exactly the uninterrupted study's results (but for
// the clock).
func TestResumeRepeatsTrialsWithoutHistory(t *testing.T) {
	n := trialsN(24)
	o := baseOptions(n)
	o.Workers, o.Policy.ResetEvery = 1, 1
	full, _ := run(t, o)

	path := filepath.Join(t.TempDir(), "study.jsonl")
	o.State = path
	stop := errors.New("stop")
	o.AfterRecord = func(r Record) error {
		if r.ID == n/3 {
			return stop
		}
		return nil
	}
	_, err := Run(o)
	require.ErrorIs(t, err, stop)
	o.AfterRecord, o.Resume = nil, true
	res, err := Run(o)
	require.NoError(t, err)
	require.Len(t, res.State.Records, n)
	for i, r := range res.State.Records {
		require.Equal(t, strip(full.State.Records[i]), strip(r))
	}
}

// TestResumeTornLine cuts the state file in the middle of a line, as a
// kill during a write would, and resumes.
func TestResumeTornLine(t *testing.T) {
	n := trialsN(30)
	path := filepath.Join(t.TempDir(), "study.jsonl")
	o := baseOptions(n)
	o.State = path
	_, err := Run(o)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	// Keep the header and k trial lines, then half of the next.
	k := n / 2
	cut := append(bytes.Join(lines[:k+1], nil), lines[k+1][:len(lines[k+1])/2]...)
	require.NoError(t, os.WriteFile(path, cut, 0o644))

	st, err := LoadState(path)
	require.NoError(t, err)
	require.True(t, st.Torn)
	require.Len(t, st.Records, k)

	var warn bytes.Buffer
	o.Resume, o.Warn = true, &warn
	res, err := Run(o)
	require.NoError(t, err)
	require.Contains(t, warn.String(), "dropped a torn last line")
	after, err := LoadState(path)
	require.NoError(t, err)
	require.False(t, after.Torn)
	require.Len(t, after.Records, n)
	require.Equal(t, res.State.Records, after.Records)
	ids := map[int]bool{}
	for _, r := range after.Records {
		require.False(t, ids[r.ID])
		ids[r.ID] = true
	}
	require.True(t, after.Resumes[0].DroppedTorn)
}

func TestResumeRefusesOtherOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "study.jsonl")
	o := baseOptions(6)
	o.State = path
	_, err := Run(o)
	require.NoError(t, err)

	o.Resume = true
	o2 := o
	o2.Workers = 2
	o2.AllocConf = "expandable_segments:True"
	_, err = Run(o2)
	require.ErrorContains(t, err, "par: file has 4, this run 2")
	require.ErrorContains(t, err, `alloc_conf: file has "", this run "expandable_segments:True"`)

	o3 := o
	o3.Space = testSpace().Unconstrained()
	_, err = Run(o3)
	require.ErrorContains(t, err, "space: file has bert-family, this run bert-family-unconstrained")

	// Without --resume an existing file is not overwritten.
	o4 := o
	o4.Resume = false
	_, err = Run(o4)
	require.ErrorContains(t, err, "exists")

	// More trials extend the study.
	o5 := o
	o5.Trials = 9
	res, err := Run(o5)
	require.NoError(t, err)
	require.Len(t, res.State.Records, 9)
	require.Equal(t, 9, Summarize(res.State, res.Planned).Finished)
	st, err := LoadState(path)
	require.NoError(t, err)
	rep := Summarize(st, 0)
	require.Equal(t, 9, rep.Planned, "the report of the file knows the study grew")
	require.Zero(t, rep.NotRun)
}

func TestReadStateErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "study.jsonl")
	o := baseOptions(4)
	o.State = path
	_, err := Run(o)
	require.NoError(t, err)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(good), "\n")
	require.GreaterOrEqual(t, len(lines), 4)

	for _, c := range []struct{ name, body, want string }{
		{"empty", "", "no complete header line"},
		{"torn header", lines[0][:20], "s.jsonl: no complete header line"},
		{"torn other", `{"kind":"trial"`, "s.jsonl:1: not a JSON object"},
		{"binary", "\x00\x01", "s.jsonl:1: not a JSON object"},
		{"no header", lines[1], "s.jsonl:1: first line is \"trial\""},
		{"bad middle", lines[0] + "{oops\n" + lines[1], "s.jsonl:2: not a JSON object"},
		{"duplicate", lines[0] + lines[1] + lines[1], "recorded twice"},
		{"unknown kind", lines[0] + `{"kind":"party"}` + "\n", `s.jsonl:2: unknown line kind "party"`},
		{"unknown field", lines[0] + `{"kind":"resume","run":1,"at_us":0,"mood":1}` + "\n", `s.jsonl:2: resume: json: unknown field "mood"`},
		{"bad outcome", lines[0] + strings.Replace(lines[1], `"outcome":"`, `"outcome":"x`, 1), `: outcome "x`},
		{"second header", lines[0] + lines[0], "s.jsonl:2: a second header"},
		{"version", strings.Replace(lines[0], `"version":1`, `"version":9`, 1), "version 9"},
	} {
		_, err := ReadState(strings.NewReader(c.body), "s.jsonl")
		require.Error(t, err, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
	}
	// A torn last line is dropped, not an error; a complete last line
	// without its newline is kept.
	st, err := ReadState(strings.NewReader(lines[0]+lines[1]+lines[2][:10]), "s.jsonl")
	require.NoError(t, err)
	require.True(t, st.Torn)
	require.Len(t, st.Records, 1)
	st, err = ReadState(strings.NewReader(lines[0]+strings.TrimSuffix(lines[1], "\n")), "s.jsonl")
	require.NoError(t, err)
	require.False(t, st.Torn)
	require.Len(t, st.Records, 1)
}

func FuzzReadState(f *testing.F) {
	res, err := Run(baseOptions(3))
	if err != nil {
		f.Fatal(err)
	}
	var b bytes.Buffer
	for _, v := range []any{res.State.Header, res.State.Records[0], res.State.Records[1], res.State.Ends[0]} {
		line, err := jsonLine(v)
		if err != nil {
			f.Fatal(err)
		}
		b.Write(line)
	}
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:b.Len()-7])
	f.Add([]byte(`{"kind":"header","version":1,"options":{}}` + "\n" + `{"kind":"resume","run":1,"at_us":5}` + "\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := ReadState(bytes.NewReader(in), "fuzz.jsonl")
		if err != nil {
			require.Contains(t, err.Error(), "fuzz.jsonl")
			return
		}
		require.LessOrEqual(t, st.End, int64(len(in)))
		seen := map[int]bool{}
		for _, r := range st.Records {
			require.False(t, seen[r.ID])
			seen[r.ID] = true
		}
		rep := Summarize(st, 0)
		assert.Equal(t, len(st.Records), rep.Finished)
	})
}

// A state file written when the default space was called "seeds" resumes
// under its present name: same lists, old label.
func TestResumeStateOfTheSpaceUnderItsOldName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "study.jsonl")
	o := baseOptions(4)
	o.State = path
	_, err := Run(o)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	old := strings.Replace(string(b), `"bert-family"`, `"seeds"`, 1)
	require.NotEqual(t, string(b), old, "the header names the space")
	require.NoError(t, os.WriteFile(path, []byte(old), 0o644))

	o.Resume = true
	o.Trials = 6
	res, err := Run(o)
	require.NoError(t, err)
	require.Len(t, res.State.Records, 6)

	o.Space = testSpace().Unconstrained()
	_, err = Run(o)
	require.ErrorContains(t, err, "space: file has bert-family, this run bert-family-unconstrained")
}

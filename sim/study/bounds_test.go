package study

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// zeros is an endless stream of zero bytes (/dev/zero), counted.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

// A state "file" with no newline (/dev/zero, a binary file) stops at the
// line bound with an error naming it, having read little more than the
// bound: it used to read (and hold) everything. 64 MiB stands for
// "everything", so the old behaviour fails here instead of hanging.
func TestReadStateBoundsALine(t *testing.T) {
	z := &zeros{}
	_, err := ReadState(io.LimitReader(z, 64<<20), "zero.jsonl")
	require.ErrorContains(t, err, "zero.jsonl:1: line longer than 4194304 bytes")
	require.LessOrEqual(t, z.n, int64(MaxStateLine+128<<10), "read past the bound")
}

// A line at the bound is read; one byte more is refused.
func TestReadStateLineAtTheBound(t *testing.T) {
	res, err := Run(baseOptions(2))
	require.NoError(t, err)
	head, err := jsonLine(res.State.Header)
	require.NoError(t, err)
	// Pad the header line with spaces before its newline, up to max.
	pad := func(max int) []byte {
		b := append([]byte(nil), head[:len(head)-1]...)
		b = append(b, bytes.Repeat([]byte(" "), max-len(head))...)
		return append(b, '\n')
	}
	st, err := readState(bytes.NewReader(pad(4096)), "s.jsonl", 4096)
	require.NoError(t, err)
	require.Equal(t, res.State.Header.Options.Trials, st.Header.Options.Trials)
	_, err = readState(bytes.NewReader(pad(4097)), "s.jsonl", 4096)
	require.ErrorContains(t, err, "s.jsonl:1: line longer than 4096 bytes")
}

// A space file past MaxSpaceBytes is refused by its size, whatever it
// holds; one at the bound is parsed.
func TestLoadSpaceBound(t *testing.T) {
	dir := t.TempDir()
	b, err := json.Marshal(SeedsSpace())
	require.NoError(t, err)
	at := filepath.Join(dir, "at.json")
	require.NoError(t, os.WriteFile(at, append(b, bytes.Repeat([]byte(" "), MaxSpaceBytes-len(b))...), 0o644))
	_, err = LoadSpace(at)
	require.NoError(t, err)
	over := filepath.Join(dir, "over.json")
	require.NoError(t, os.WriteFile(over, append(b, bytes.Repeat([]byte(" "), MaxSpaceBytes-len(b)+1)...), 0o644))
	_, err = LoadSpace(over)
	require.ErrorContains(t, err, over+": larger than 1048576 bytes")

	z := &zeros{}
	_, err = readSpace(io.LimitReader(z, 64<<20), "zero.json", MaxSpaceBytes)
	require.ErrorContains(t, err, "larger than")
	require.LessOrEqual(t, z.n, int64(MaxSpaceBytes+128<<10))
}

// The line bound changes nothing but where a long line fails: with every
// line inside it, readState says what the unbounded reader says; with one
// past it, it fails naming the bound.
func FuzzReadStateLineBound(f *testing.F) {
	f.Add([]byte(`{"kind":"header","version":1,"options":{}}`+"\n"+`{"kind":"resume","run":1,"at_us":5}`+"\n"), uint8(40))
	f.Add([]byte(`{"kind":"header","version":1,"options":{}}`+"\n"+`{"kind":"resume","run":1,"at_us":5}`), uint8(80))
	f.Add([]byte("\n\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, max uint8) {
		bound := int(max) + 1
		got, gerr := readState(bytes.NewReader(in), "f.jsonl", bound)
		want, werr := readState(bytes.NewReader(in), "f.jsonl", len(in)+1)
		fits := true
		for _, l := range bytes.SplitAfter(in, []byte("\n")) {
			fits = fits && len(l) <= bound
		}
		if fits {
			require.Equal(t, werr, gerr)
			require.Equal(t, want, got)
			return
		}
		require.Error(t, gerr)
		if werr == nil {
			require.Contains(t, gerr.Error(), "longer than")
		}
	})
}

// The space bound likewise: within it, readSpace parses as ParseSpace does.
func FuzzReadSpaceBound(f *testing.F) {
	b, _ := json.Marshal(SeedsSpace())
	f.Add(b, uint16(len(b)))
	f.Add([]byte(`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`), uint16(20))
	f.Fuzz(func(t *testing.T, in []byte, max uint16) {
		got, gerr := readSpace(bytes.NewReader(in), "f.json", int(max))
		if len(in) > int(max) {
			require.ErrorContains(t, gerr, "larger than")
			return
		}
		want, werr := ParseSpace(in)
		if werr != nil {
			require.Error(t, gerr)
			require.True(t, strings.HasPrefix(gerr.Error(), "f.json:") && strings.HasSuffix(gerr.Error(), werr.Error()), gerr.Error())
			return
		}
		require.NoError(t, gerr)
		require.Equal(t, want, got)
	})
}

// A state file left empty or with its header cut short (the study killed,
// or the disk full, as it created the file) resumes as a fresh study,
// with a warning: it used to fail with "no header line" forever.
func TestResumeStateCutAtCreation(t *testing.T) {
	dir := t.TempDir()
	fresh := baseOptions(4)
	fresh.State = filepath.Join(dir, "fresh.jsonl")
	want, err := Run(fresh)
	require.NoError(t, err)
	whole, err := os.ReadFile(fresh.State)
	require.NoError(t, err)
	header := whole[:bytes.IndexByte(whole, '\n')]

	for _, n := range []int{0, 1, 17, len(header) / 2, len(header)} {
		o := baseOptions(4)
		o.State = filepath.Join(dir, "cut.jsonl")
		o.Resume = true
		var warn bytes.Buffer
		o.Warn = &warn
		require.NoError(t, os.WriteFile(o.State, header[:n], 0o644))
		res, err := Run(o)
		if n == len(header) {
			// The whole header without its newline is a header: a
			// plain resume of a study with no trial yet.
			require.NoError(t, err)
			require.Len(t, res.State.Resumes, 1)
			continue
		}
		require.NoError(t, err, "cut at %d", n)
		require.Contains(t, warn.String(), "starting the study afresh", "cut at %d", n)
		require.Empty(t, res.State.Resumes, "cut at %d: a fresh study, not a resume", n)
		require.Equal(t, Summarize(want.State, want.Planned), Summarize(res.State, res.Planned), "cut at %d", n)
		got, err := os.ReadFile(o.State)
		require.NoError(t, err)
		require.Equal(t, whole, got, "cut at %d: the file is the fresh study's", n)
		os.Remove(o.State)
	}
}

// A header that cannot be written leaves no state file behind (which
// --resume could not read). The header fails here in encoding (a NaN
// option); a full disk fails the same write.
func TestCreateStateLeavesNothingOnFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	h := Header{Kind: "header", Version: stateVersion}
	h.Options.OOMCorrupts = math.NaN()
	_, err := createState(path, h)
	require.Error(t, err)
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}

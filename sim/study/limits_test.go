package study

import (
	"bytes"
	"encoding/json"
	"io"
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
			require.True(t, strings.HasSuffix(gerr.Error(), werr.Error()) || strings.Contains(gerr.Error(), "f.json"), gerr.Error())
			return
		}
		require.NoError(t, gerr)
		require.Equal(t, want, got)
	})
}

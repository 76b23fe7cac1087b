package placement

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadCSV(t *testing.T) {
	in := "id,lower,upper,size\n0,0,3,4\n1,3,9,4\n2,0,9,4\n"
	bufs, offs, err := ReadCSV(strings.NewReader(in), "p.csv")
	require.NoError(t, err)
	require.Nil(t, offs)
	require.Equal(t, []Buffer{
		{ID: "0", Lower: 0, Upper: 3, Size: 4},
		{ID: "1", Lower: 3, Upper: 9, Size: 4},
		{ID: "2", Lower: 0, Upper: 9, Size: 4},
	}, bufs)

	// minimalloc's older names; end is inclusive.
	bufs, _, err = ReadCSV(strings.NewReader("buffer,start,end,size\nb1,0,3,4\n"), "old.csv")
	require.NoError(t, err)
	require.Equal(t, []Buffer{{ID: "b1", Lower: 0, Upper: 4, Size: 4}}, bufs)

	// Alignment and offset columns, in any order, spaces and a BOM.
	bufs, offs, err = ReadCSV(strings.NewReader("\ufeffoffset, size,id,lower,upper,alignment\n8, 16,x,1,2,8\n"), "a.csv")
	require.NoError(t, err)
	require.Equal(t, []Buffer{{ID: "x", Lower: 1, Upper: 2, Size: 16, Alignment: 8}}, bufs)
	require.Equal(t, []uint64{8}, offs)
}

func TestReadCSVErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "f.csv:1: empty file"},
		{"id,lower,upper\n", "f.csv:1: the header has no size column"},
		{"id,lower,upper,size,colour\n", "f.csv:1: column colour: unknown column"},
		{"id,lower,upper,size,gaps\n", "f.csv:1: column gaps: gaps are not supported"},
		{"id,lower,upper,end,size\n", "f.csv:1: column end: named twice"},
		{"id,lower,upper,size\n0,0,3,4\n1,0,3\n", "f.csv:3: 3 fields, the header has 4"},
		{"id,lower,upper,size\n0,0,3,4\n1,x,3,4\n", `f.csv:3: column lower: "x" is not an integer`},
		{"id,lower,upper,size\n0,0,3,-4\n", `f.csv:2: column size: "-4" is not a non-negative integer`},
		{"id,lower,upper,size\n0,0,3,0\n", "f.csv:2: column size: size 0"},
		{"id,lower,upper,size\n0,5,3,1\n", "f.csv:2: column upper: upper 3 <= lower 5"},
		{"buffer,start,end,size\n0,5,4,1\n", "f.csv:2: column end: upper 5 <= lower 5"},
		{"id,lower,upper,size,alignment\n0,0,3,1,3\n", "f.csv:2: column alignment: alignment 3 is not a power of two"},
		{"id,lower,upper,size\n0,0,3,1\n\n0,1,2,1\n", `f.csv:4: column id: duplicate id "0" (also on line 2)`},
		{"id,lower,upper,size\n0,0,1,2305843009213693952\n1,0,1,2305843009213693952\n", "f.csv:3: column size: the sizes up to here add up"},
		{"id,lower,upper,size\n\"0,0,3,1\n", "f.csv:2: byte"},
		{"id,lower,upper,size,offset\n0,0,3,1,q\n", `f.csv:2: column offset: "q" is not`},
	} {
		_, _, err := ReadCSV(strings.NewReader(tc.in), "f.csv")
		require.Error(t, err, tc.in)
		require.ErrorContains(t, err, tc.want, tc.in)
		var ce *CSVError
		require.ErrorAs(t, err, &ce)
	}
}

func TestWriteCSVRoundTrip(t *testing.T) {
	bufs := []Buffer{
		{ID: "a,b", Lower: -3, Upper: 2, Size: 16, Alignment: 8},
		{ID: `q"t`, Lower: 0, Upper: 5, Size: 3},
	}
	sol, err := Solve(bufs, Options{})
	require.NoError(t, err)
	var w bytes.Buffer
	require.NoError(t, WriteCSV(&w, bufs, sol.Offsets))
	require.True(t, strings.HasPrefix(w.String(), "id,lower,upper,size,alignment,offset\n"), w.String())
	got, offs, err := ReadCSV(&w, "w.csv")
	require.NoError(t, err)
	bufs[1].Alignment = 1 // written as 1 once a column exists
	require.Equal(t, bufs, got)
	require.Equal(t, sol.Offsets, offs)

	w.Reset()
	require.NoError(t, WriteCSV(&w, bufs[1:], nil))
	require.Equal(t, "id,lower,upper,size\n\"q\"\"t\",0,5,3\n", w.String())
	require.Error(t, WriteCSV(&w, bufs, []uint64{1}))
}

// noNewline is 64 MiB without a newline, like /dev/zero (which does
// not end), counting what was read of it.
type noNewline struct{ read int64 }

func (e *noNewline) Read(p []byte) (int, error) {
	if e.read >= 64<<20 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), 64<<20-e.read)]
	for i := range p {
		p[i] = '7'
	}
	e.read += int64(len(p))
	return len(p), nil
}

// A line longer than MaxCSVLine is an error naming its line, after
// reading little more than the line: encoding/csv alone grew one line of
// /dev/zero until the process ran out of memory.
func TestReadCSVBoundsLines(t *testing.T) {
	src := &noNewline{}
	_, _, err := ReadCSV(src, "zero")
	require.EqualError(t, err, "zero:1: line longer than 65536 bytes: not a placement CSV line")
	require.Less(t, src.read, int64(1<<20))

	long := "id,lower,upper,size\n0,0,1,1\n" + strings.Repeat("9", 65536+1) + ",0,1,1\n"
	_, _, err = ReadCSV(strings.NewReader(long), "p.csv")
	require.EqualError(t, err, "p.csv:3: line longer than 65536 bytes: not a placement CSV line")

	// A quoted field cannot hide a long line: its newline ends the line.
	quoted := "id,lower,upper,size\n\"" + strings.Repeat("a\n", 65536) + "\",0,1,1\n"
	bufs, _, err := ReadCSV(strings.NewReader(quoted), "q.csv")
	require.NoError(t, err)
	require.Len(t, bufs, 1)

	// The longest line passes.
	ok := "id,lower,upper,size\n" + strings.Repeat("9", 65536-len(",0,1,1")) + ",0,1,1\n"
	_, _, err = ReadCSV(strings.NewReader(ok), "ok.csv")
	require.NoError(t, err)
}

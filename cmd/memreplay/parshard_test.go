package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parShards runs the search of args in n shards into dir and returns the
// parts' paths.
func parShards(t *testing.T, dir string, n int, args ...string) []string {
	t.Helper()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("part-%d.json", i))
		var out, errb bytes.Buffer
		code := run(append([]string{"par", "--shard", fmt.Sprintf("%d/%d", i, n), "-o", p}, args...), &out, &errb)
		require.Equal(t, 0, code, errb.String())
		assert.Empty(t, out.String(), "the part goes to the file")
		paths = append(paths, p)
	}
	return paths
}

func TestParMergeEqualsOneRun(t *testing.T) {
	space, dir := tinySpace(t), t.TempDir()
	search := quickPar(space, "--mixes", "5")
	parts := parShards(t, dir, 3, search...)
	for _, format := range []string{"json", "markdown", "table"} {
		var one, merged, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"par", "--format", format}, search...), &one, &errb), errb.String())
		require.Equal(t, 0, run(append([]string{"par", "--merge", "--format", format}, parts...), &merged, &errb), errb.String())
		assert.Equal(t, one.String(), merged.String(), format)
	}
	// A part on stdout is the same part.
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(append([]string{"par", "--shard", "1/3"}, search...), &out, &errb), errb.String())
	b, err := os.ReadFile(parts[1])
	require.NoError(t, err)
	assert.Equal(t, string(b), out.String())
}

func TestParMergeRefuses(t *testing.T) {
	space, dir := tinySpace(t), t.TempDir()
	search := quickPar(space, "--mixes", "4")
	parts := parShards(t, dir, 2, search...)
	other := parShards(t, t.TempDir(), 2, append(search, "--seed", "7")...)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"other options", []string{parts[0], other[1]}, other[1] + ": a shard of another search"},
		{"twice", []string{parts[0], parts[1], parts[1]}, parts[1] + ": shard 1/2 given twice"},
		{"missing", []string{parts[1]}, "shard 0/2 is missing"},
		{"not a part", []string{parts[0], space}, space + ": not a par shard"},
		{"search flags", append([]string{"--seed", "2"}, parts...), "--seed belongs on the shards' command line"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(append([]string{"par", "--merge"}, c.args...), &out, &errb)
		assert.Equal(t, 2, code, c.name)
		assert.Contains(t, errb.String(), c.want, c.name)
		assert.Empty(t, out.String(), c.name)
	}
	for _, bad := range [][]string{{"--shard", "3/3"}, {"--shard", "0/2", "--html", "x.html"}, {"--shard", "0/2", "--format", "markdown"}, {"-o", "x.json"}} {
		var out, errb bytes.Buffer
		assert.Equal(t, 2, run(append(append([]string{"par"}, bad...), search...), &out, &errb), bad)
	}
}

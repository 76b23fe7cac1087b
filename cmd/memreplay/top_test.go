package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// --top takes a count of sites: a negative one is bad usage (it used to
// mean 10, as 0 did), and 0 lists every site.
func TestTopFlag(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "--top", "-3", partialTrace},
		{"compare", "--top", "-3", partialTrace, "--alloc-conf", "expandable_segments:True"},
		{"report", "--top", "-3", partialTrace, "-o", filepath.Join(t.TempDir(), "r.html")},
	} {
		code, _, stderr := runCLI(args...)
		require.Equal(t, 2, code, "%q", args)
		require.Contains(t, stderr, "--top -3: want a number of sites (0: all of them)", "%q", args)
	}

	sites := func(top string) int {
		code, stdout, stderr := runCLI("replay", "--format", "json", "--top", top, partialTrace)
		require.Equal(t, 0, code, stderr)
		var rep struct {
			TopSites []any `json:"top_sites"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		return len(rep.TopSites)
	}
	require.Equal(t, 10, sites("10"))
	require.Equal(t, 3, sites("3"))
	all := sites("0")
	require.Greater(t, all, 10, "0 lists every site")
	require.Equal(t, all, sites("100000"))

	code, stdout, stderr := runCLI("replay", "--top", "0", partialTrace)
	require.Equal(t, 0, code, stderr)
	m := regexp.MustCompile(`Top (\d+) allocation sites at peak \(ranked by live \+ stranded bytes\)`).FindStringSubmatch(stdout)
	require.NotNil(t, m, stdout)
	require.Equal(t, strconv.Itoa(all), m[1])
}

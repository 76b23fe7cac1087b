package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every unit is taken the same way, decimal and binary, any case; the
// error quotes the value as written (it used to say `bad size "20K"` for
// 20KB, having cut the B off, and refused KB and KiB though GB was taken).
func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"20KB": 20_000, "20kB": 20_000, "20KiB": 20 << 10, "20kib": 20 << 10,
		"3MB": 3_000_000, "3MiB": 3 << 20, "24GB": 24_000_000_000, "24GiB": 24 << 30, "24gib": 24 << 30,
		"2TB": 2_000_000_000_000, "2TiB": 2 << 40, "1.5GiB": 3 << 29, " 1.5 GiB ": 3 << 29,
		"512B": 512, "1048576": 1 << 20, "1e3": 1000,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"20K":   `bad size "20K": want a number and a unit`,
		"20XB":  `bad size "20XB": want a number and a unit`,
		"lots":  `bad size "lots"`,
		"GiB":   `bad size "GiB"`,
		"NaN":   `bad size "NaN"`,
		"inf":   `bad size "inf"`,
		"0GiB":  `bad size "0GiB": want more than 0 bytes`,
		"-1GB":  `bad size "-1GB": want more than 0 bytes`,
		"5EiB":  `bad size "5EiB"`,
		"9e9TB": `bad size "9e9TB": want less than 4 EiB`,
	} {
		_, err := parseSize(in)
		require.ErrorContains(t, err, want, in)
	}
	code, _, stderr := runCLI("replay", "--capacity", "20QB", partialTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--capacity: bad size "20QB"`)
	code, _, stderr = runCLI("replay", "--capacity", "700MB", "--format", "json", partialTrace)
	require.Equal(t, 0, code, stderr)
}

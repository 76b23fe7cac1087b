package config

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStoi(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"30", 30, true}, {"+30", 30, true}, {"-30", -30, true}, {" \t30", 30, true},
		{"30abc", 30, true}, {"3 0", 3, true}, {"0x10", 0, true}, {"2147483647", math.MaxInt32, true},
		{"-2147483648", math.MinInt32, true}, {"2147483648", 0, false}, {"-2147483649", 0, false},
		{"99999999999999999999999", 0, false}, {"", 0, false}, {"-", 0, false}, {"+-1", 0, false}, {"abc", 0, false},
	} {
		v, err := stoi(tc.in)
		assert.Equal(t, tc.ok, err == nil, "%q", tc.in)
		if tc.ok {
			assert.Equal(t, tc.want, v, "%q", tc.in)
		} else {
			assert.Equal(t, "stoi", err.what, "%q", tc.in)
		}
	}
}

func TestStoull(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"18446744073709551615", math.MaxUint64, true}, {"-1", math.MaxUint64, true}, {"-0", 0, true},
		{"-18446744073709551615", 1, true}, {"18446744073709551616", 0, false}, {"x", 0, false},
	} {
		v, err := stoull(tc.in, "stoull")
		assert.Equal(t, tc.ok, err == nil, "%q", tc.in)
		if tc.ok {
			assert.Equal(t, tc.want, v, "%q", tc.in)
		}
	}
}

func TestStod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.5", 0.5, true}, {".5", 0.5, true}, {"5.", 5, true}, {"+5e-1", 0.5, true}, {"1e", 1, true},
		{"1e+", 1, true}, {"0x1p-1", 0.5, true}, {"0X.8", 0.5, true}, {"0x", 0, true}, {"0xg", 0, true},
		{"0.5.5", 0.5, true}, {"INF", math.Inf(1), true}, {"-Infinity", math.Inf(-1), true},
		{"0e999999999999", 0, true}, {"1e-400", 0, false}, {"1e400", 0, false}, {"4e-320", 0, false},
		{".", 0, false}, {"e5", 0, false}, {"", 0, false}, {"x", 0, false}, {"+", 0, false},
	} {
		v, err := stod(tc.in)
		assert.Equal(t, tc.ok, err == nil, "%q", tc.in)
		if tc.ok {
			assert.Equal(t, tc.want, v, "%q", tc.in)
		}
	}
	v, err := stod("nan(0x1)")
	assert.Nil(t, err)
	assert.True(t, math.IsNaN(v))
}

func TestValidReserve(t *testing.T) {
	for in, want := range map[string]bool{
		"0.5": true, "40G": true, "40g": true, "1e3": true, "+2": true, ".5G": true,
		"0": false, "-1": false, "G": false, "": false, "inf": false, "nan": false, "1e": false,
		"0x1": false, "40GB": false, "1e999": false, "4 0": false,
	} {
		assert.Equal(t, want, validReserve(in), "%q", in)
	}
}

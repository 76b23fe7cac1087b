package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units a size flag takes, matched without regard to
// case: decimal (KB = 1000 B, as disks and `nvidia-smi --query` count)
// and binary (KiB = 1024 B, as PyTorch and this tool print). A bare K, M
// or G is refused: it reads as either.
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// maxSize bounds a size: the device model counts in uint64 bytes and adds
// sizes together, so anything near 2^64 would overflow; 2^62 bytes (4 EiB)
// is far beyond any device.
const maxSize = 1 << 62

// parseSize reads a size flag: a positive number and a unit ("24GiB",
// "1.5 GiB", "500MB", "64kib") or plain bytes ("1048576"). Its error
// quotes the value as given.
func parseSize(s string) (uint64, error) {
	num, mult := strings.TrimSpace(s), 1.0
	lower := strings.ToLower(num)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fmt.Errorf("bad size %q: want a number and a unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 24GiB", s)
	case f <= 0:
		return 0, fmt.Errorf("bad size %q: want more than 0 bytes", s)
	case f*mult >= maxSize:
		return 0, fmt.Errorf("bad size %q: want less than 4 EiB", s)
	}
	return uint64(f * mult), nil
}

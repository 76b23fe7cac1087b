package config

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// The 2026 expandable-segment reservation options (new dialect only). Their
// values are "0.5" (a fraction of device memory) or "40G" (GiB); PyTorch
// warns about anything else and keeps the previous value, so they never
// cause an error beyond running out of tokens.

// newReserve parses expandable_segments_reserve. PyTorch warns about a bad
// value and keeps the previous one; there is no error to give.
func (p *parser) newReserve(i int) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	if validReserve(p.tok(i)) {
		p.c.ExpandableSegmentsReserve = p.tok(i)
	}
	return i, nil
}

// newReserveByClass parses expandable_segments_reserve_by_class:[name:v,...].
// Neither the "[" nor the ":" is checked, bad values are dropped, and the
// list replaces the previous one as a whole.
func (p *parser) newReserveByClass(i int) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	entries := map[string]string{}
	for {
		if err := p.need(i + 1); err != nil {
			return i + 1, err
		}
		if p.tok(i+1) == "]" {
			break
		}
		i++
		name := p.tok(i)
		for range 2 {
			i++
			if err := p.need(i); err != nil {
				return i, err
			}
		}
		if validReserve(p.tok(i)) {
			entries[name] = p.tok(i)
		}
		if err := p.need(i + 1); err != nil {
			return i + 1, err
		}
		if p.tok(i+1) == "," {
			i++
		}
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	for k, name := range names {
		names[k] = name + ":" + entries[name]
	}
	p.c.ExpandableSegmentsReserveByClass = strings.Join(names, ",")
	return i + 1, nil
}

// validReserve is parseReserveSpec's test: a positive finite number read by
// an istringstream that must consume all of it, optionally followed by G or
// g for GiB.
func validReserve(tok string) bool {
	num := tok
	if n := len(num); n > 0 && (num[n-1] == 'G' || num[n-1] == 'g') {
		num = num[:n-1]
	}
	i := 0
	if i < len(num) && (num[i] == '+' || num[i] == '-') {
		i++
	}
	end, _, hex, _ := scanCFloat(num, i)
	if end != len(num) || hex {
		return false
	}
	v, err := strconv.ParseFloat(num, 64)
	return err == nil && !math.IsInf(v, 0) && v > 0
}

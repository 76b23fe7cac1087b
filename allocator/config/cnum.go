package config

import (
	"math"
	"strconv"
	"strings"
)

// The parsers read numbers with std::stoi, std::stoul, std::stoull and
// std::stod, and what those accept decides which strings PyTorch takes:
// leading whitespace and a sign are allowed, anything after the number is
// ignored ("30abc" is 30), a negative value given to stoul/stoull wraps
// around, and a stoi result is converted to size_t, so "-1" becomes
// SIZE_MAX. These functions reproduce that. On failure they return the text
// libstdc++ puts in the exception, which is the function's name and is all
// PyTorch reports, plus a detail of our own.

// numError is a failed conversion: what is the exception's what() text.
type numError struct {
	what, detail string
}

// stoi is std::stoi: strtol base 10, then a check that the value fits in int.
func stoi(s string) (int64, *numError) {
	neg, mag, err := scanCInteger(s, "stoi")
	if err != nil {
		return 0, err
	}
	if (!neg && mag > math.MaxInt32) || (neg && mag > -math.MinInt32) {
		return 0, &numError{"stoi", "out of range: " + strconv.Quote(s)}
	}
	if neg {
		return -int64(mag), nil
	}
	return int64(mag), nil
}

// stoull is std::stoull (and std::stoul, unsigned long being 64 bits on the
// platforms PyTorch ships for): strtoull base 10, where "-n" is 2^64-n.
func stoull(s, name string) (uint64, *numError) {
	neg, mag, err := scanCInteger(s, name)
	if err != nil {
		return 0, err
	}
	if neg {
		return -mag, nil
	}
	return mag, nil
}

// scanCInteger reads [space][+-]digits like strtol/strtoull and reports the
// sign and magnitude. A magnitude above 2^64-1 is out of range for both
// (strtol's narrower range is checked by stoi's caller only for int, which
// is stricter).
func scanCInteger(s, name string) (neg bool, mag uint64, err *numError) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	overflow := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if mag > (math.MaxUint64-d)/10 {
			overflow = true
		}
		mag = mag*10 + d
	}
	if i == start {
		return false, 0, &numError{name, "not a number: " + strconv.Quote(s)}
	}
	if overflow {
		return false, 0, &numError{name, "out of range: " + strconv.Quote(s)}
	}
	return neg, mag, nil
}

// smallestNormal is DBL_MIN. glibc's strtod sets ERANGE for results below
// it, and stod turns ERANGE into out_of_range.
const smallestNormal = 2.2250738585072014e-308

// stod is std::stod: strtod in the C locale, accepting decimal and
// hexadecimal floats, "inf", "infinity" and "nan" in any case, and failing
// with out_of_range on overflow and underflow.
func stod(s string) (float64, *numError) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	start := i
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	rest := strings.ToLower(s[i:])
	switch {
	case strings.HasPrefix(rest, "inf"):
		if neg {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	case strings.HasPrefix(rest, "nan"):
		return math.NaN(), nil
	}
	end, nonzero, hex, hasExp := scanCFloat(s, i)
	if end < 0 {
		return 0, &numError{"stod", "not a number: " + strconv.Quote(s)}
	}
	lit := s[start:end]
	if hex && !hasExp {
		// Go insists on a binary exponent in hexadecimal floats; C does not.
		lit += "p0"
	}
	v, perr := strconv.ParseFloat(lit, 64)
	if perr != nil || (v == 0 && nonzero) || (v != 0 && math.Abs(v) < smallestNormal) {
		return 0, &numError{"stod", "out of range: " + strconv.Quote(s)}
	}
	return v, nil
}

// scanCFloat finds the end of the longest strtod number starting at s[i]
// (after the sign). It returns -1 if there is none, whether a nonzero digit
// was seen (to tell underflow from zero), and the form of the number.
func scanCFloat(s string, i int) (end int, nonzero, hex, hasExp bool) {
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	isHex := func(c byte) bool {
		return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f')
	}
	digitsIn := isDigit
	expChar := byte('e')
	if i+1 < len(s) && s[i] == '0' && s[i+1]|0x20 == 'x' {
		j := i + 2
		if (j < len(s) && isHex(s[j])) || (j+1 < len(s) && s[j] == '.' && isHex(s[j+1])) {
			hex, digitsIn, expChar, i = true, isHex, 'p', j
		}
	}
	digits := 0
	for ; i < len(s) && digitsIn(s[i]); i++ {
		digits++
		nonzero = nonzero || s[i] != '0'
	}
	if i < len(s) && s[i] == '.' {
		i++
		for ; i < len(s) && digitsIn(s[i]); i++ {
			digits++
			nonzero = nonzero || s[i] != '0'
		}
	}
	if digits == 0 {
		return -1, false, false, false
	}
	if i < len(s) && s[i]|0x20 == expChar {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			i, hasExp = j, true
		}
	}
	return i, nonzero, hex, hasExp
}

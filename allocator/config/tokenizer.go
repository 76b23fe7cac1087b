package config

import "fmt"

// ConfigTokenizer's accessors, as the new dialect uses them. Only the
// existence of a token is ever enforced: checkToken returns a bool that the
// parsers ignore, so "max_split_size_mb,64" reads like "max_split_size_mb:64".

// need is ConfigTokenizer's bounds assertion; it is also all that
// checkToken enforces.
func (p *parser) need(i int) *Error {
	if !p.has(i) {
		return p.fail(i, "Index out of bounds in ConfigTokenizer")
	}
	return nil
}

func (p *parser) toSizeT(i int) (uint64, *Error) {
	if err := p.need(i); err != nil {
		return 0, err
	}
	v, ne := stoull(p.tok(i), "stoull")
	if ne != nil {
		return 0, p.failNum(i, ne)
	}
	return v, nil
}

func (p *parser) toDouble(i int) (float64, *Error) {
	if err := p.need(i); err != nil {
		return 0, err
	}
	v, ne := stod(p.tok(i))
	if ne != nil {
		return 0, p.failNum(i, ne)
	}
	return v, nil
}

// valueAt returns the index of the value of the key at i: two tokens on,
// past the separator, which the new dialect does not check (checkToken's
// result is ignored in 2.9).
func (p *parser) valueAt(i int) (int, *Error) {
	i++
	if err := p.need(i); err != nil {
		return i, err
	}
	i++
	if err := p.need(i); err != nil {
		return i, err
	}
	return i, nil
}

// skipKey passes over a key, its ":" and its value, which may be a list;
// it returns the index of the value or of the closing "]".
func (p *parser) skipKey(i int) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	if p.tok(i) != "[" {
		return i, nil
	}
	for i++; p.has(i) && p.tok(i) != "]"; i++ {
	}
	if !p.has(i) {
		return i, p.fail(i, "Expected closing bracket ']' in ConfigTokenizer but reached end of config")
	}
	return i, nil
}

// newBool is checkToken(++i, ":") then toBool(++i).
func (p *parser) newBool(i int, dst *bool) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	switch p.tok(i) {
	case "True":
		*dst = true
	case "False":
		*dst = false
	default:
		return i, p.fail(i, fmt.Sprintf("Expected 'True' or 'False' at index %d in ConfigTokenizer but got '%s'", i, p.tok(i)))
	}
	return i, nil
}

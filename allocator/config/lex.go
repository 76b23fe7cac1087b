package config

import "strings"

// token is one lexed piece of a settings string. off is the byte offset of
// its first byte, kept so that errors can point into the input.
type token struct {
	text string
	off  int
}

// lex splits s the way both PyTorch lexers do: each of , : [ ] ends the
// current token and is a token itself, and whitespace is dropped, not
// treated as a separator, so "max_split _size_mb" lexes as one key. The old
// lexer drops only ' '; the new ConfigTokenizer drops everything C isspace
// accepts. The old parser also received the string through c_str(), so it
// never sees past a NUL byte.
func lex(s string, d Dialect) []token {
	if d == DialectOld {
		if i := strings.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
	}
	var toks []token
	var buf []byte
	start := -1
	flush := func() {
		if start >= 0 {
			toks = append(toks, token{text: string(buf), off: start})
			buf, start = buf[:0], -1
		}
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ',' || ch == ':' || ch == '[' || ch == ']':
			flush()
			toks = append(toks, token{text: s[i : i+1], off: i})
		case ch == ' ' || (d != DialectOld && isCSpace(ch)):
		default:
			if start < 0 {
				start = i
			}
			buf = append(buf, ch)
		}
	}
	flush()
	return toks
}

// lexEnd is where the parser of dialect d sees the input end: errors about a
// missing token point there.
func lexEnd(s string, d Dialect) int {
	if d == DialectOld {
		if i := strings.IndexByte(s, 0); i >= 0 {
			return i
		}
	}
	return len(s)
}

// isCSpace is isspace in the C locale, which is what both the tokenizer and
// strtol/strtod skip.
func isCSpace(ch byte) bool {
	switch ch {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

package config

import (
	"fmt"
	"strings"
)

// Error is a rejected settings string.
type Error struct {
	// Input is the settings string that was being parsed.
	Input string
	// Offset is the byte offset in Input of the offending token, or the
	// length of the input the parser saw when it ran out of tokens.
	Offset int
	// Token is the offending token, "" when the input ended early.
	Token string
	// Option is the option being parsed (for an unknown key, the key).
	Option string
	// Msg is PyTorch's message for this failure in the chosen dialect,
	// character for character. For an unreadable number that is only the
	// name of the C++ conversion ("stoi", "stoull", "stod"), because that is
	// all std::invalid_argument and std::out_of_range carry.
	Msg string
	// Detail says more where Msg alone is cryptic; not PyTorch text.
	Detail string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "alloc conf %q at offset %d: ", e.Input, e.Offset)
	if e.Option != "" {
		b.WriteString(e.Option)
		b.WriteString(": ")
	}
	// Several PyTorch messages end in a space left over from string
	// concatenation; it is kept in Msg but not worth printing.
	b.WriteString(strings.TrimSpace(e.Msg))
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Package datadriven runs scenario tests written as text files, in the style
// of cockroachdb/pebble's data-driven tests. A file is a sequence of cases:
//
//	# comments and blank lines between cases are kept
//	command arg key=value key=value
//	optional input lines
//	----
//	expected output lines
//	<blank line>
//
// Each case's command line and input go to the test's function, whose
// return value must equal the expected output. Run the tests with
// -rewrite to write the actual outputs back into the files; review the diff
// before committing it, since a rewrite accepts whatever the code does.
package datadriven

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of data-driven tests")

// Case is one command of a scenario file.
type Case struct {
	Pos     string // file:line, for messages
	Cmd     string
	Args    []Arg
	Input   string
	want    string
	prelude []string // comment and blank lines before the case
}

// Arg is one argument: a bare word (Key only) or key=value.
type Arg struct {
	Key, Val string
	HasVal   bool
}

// Get returns the value of key, or "" and false.
func (c *Case) Get(key string) (string, bool) {
	for _, a := range c.Args {
		if a.Key == key {
			return a.Val, a.HasVal
		}
	}
	return "", false
}

// Has reports whether the bare word or key appears.
func (c *Case) Has(key string) bool {
	for _, a := range c.Args {
		if a.Key == key {
			return true
		}
	}
	return false
}

// Fatalf stops the test with the case's position.
func (c *Case) Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s: %s: %s", c.Pos, c.Cmd, fmt.Sprintf(format, args...))
}

// Walk runs every case of the file through fn in order.
func Walk(t *testing.T, path string, fn func(t *testing.T, c *Case) string) {
	t.Helper()
	cases, trailer, err := parse(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, c := range cases {
		got := fn(t, c)
		if got != "" && !strings.HasSuffix(got, "\n") {
			got += "\n"
		}
		if *rewrite {
			c.want = got
		} else if got != c.want {
			t.Errorf("%s: %s\nexpected:\n%s\ngot:\n%s", c.Pos, c.Cmd, c.want, got)
		}
		for _, l := range c.prelude {
			out.WriteString(l + "\n")
		}
		out.WriteString(c.line() + "\n")
		if c.Input != "" {
			out.WriteString(c.Input + "\n")
		}
		out.WriteString("----\n" + c.want + "\n")
	}
	for _, l := range trailer {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		text := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *Case) line() string {
	if len(c.Args) == 0 {
		return c.Cmd
	}
	return c.Cmd + " " + c.ArgString()
}

// ArgString is the arguments as written, space separated.
func (c *Case) ArgString() string {
	var parts []string
	for _, a := range c.Args {
		if a.HasVal {
			parts = append(parts, a.Key+"="+a.Val)
		} else {
			parts = append(parts, a.Key)
		}
	}
	return strings.Join(parts, " ")
}

func parse(path string) (cases []*Case, trailer []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lineNo := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		lineNo++
		return sc.Text(), true
	}
	var prelude []string
	for {
		l, ok := next()
		if !ok {
			break
		}
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			prelude = append(prelude, l)
			continue
		}
		c := &Case{Pos: fmt.Sprintf("%s:%d", path, lineNo), prelude: prelude}
		prelude = nil
		fields := strings.Fields(l)
		c.Cmd = fields[0]
		for _, w := range fields[1:] {
			if k, v, ok := strings.Cut(w, "="); ok {
				c.Args = append(c.Args, Arg{Key: k, Val: v, HasVal: true})
			} else {
				c.Args = append(c.Args, Arg{Key: w})
			}
		}
		var input []string
		for {
			l, ok = next()
			if !ok {
				return nil, nil, fmt.Errorf("%s: case without a ---- separator", c.Pos)
			}
			if l == "----" {
				break
			}
			input = append(input, l)
		}
		c.Input = strings.Join(input, "\n")
		var want []string
		for {
			l, ok = next()
			if !ok || l == "" {
				break
			}
			want = append(want, l)
		}
		if len(want) > 0 {
			c.want = strings.Join(want, "\n") + "\n"
		}
		cases = append(cases, c)
	}
	return cases, prelude, sc.Err()
}

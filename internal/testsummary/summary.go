package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events
// included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

type testKey struct{ pkg, test string }

// summary turns the event stream back into go test's plain output and
// collects the skips.
type summary struct {
	w       io.Writer
	pending map[testKey][]string // output of tests still running
	order   []testKey            // first-seen order of pending, for a crash's leftovers
	skips   []skip
	passed  int
	failed  int
}

type skip struct {
	name   string // package.Test
	reason string
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pending: map[testKey][]string{}}
}

// read consumes the stream. A line that is not JSON (go test prints some
// errors that way) is passed through.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.w, sc.Text())
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

func (s *summary) event(e event) {
	if e.Action == "build-output" {
		fmt.Fprint(s.w, e.Output)
		return
	}
	if e.Test == "" {
		// Package level: go test prints its "ok"/"FAIL" lines and
		// anything the test binary wrote outside a test, but not the
		// binary's own "PASS".
		if e.Action == "output" && e.Output != "PASS\n" {
			fmt.Fprint(s.w, e.Output)
		}
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "output":
		if _, ok := s.pending[k]; !ok {
			s.order = append(s.order, k)
		}
		s.pending[k] = append(s.pending[k], e.Output)
	case "pass":
		s.passed++
		delete(s.pending, k)
	case "fail":
		s.failed++
		for _, l := range s.pending[k] {
			// Plain go test shows neither === lines nor a passing
			// test's output; -json keeps them for every test.
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprint(s.w, l)
			}
		}
		delete(s.pending, k)
	case "skip":
		s.skips = append(s.skips, skip{name: shortPkg(e.Package) + "." + e.Test, reason: skipReason(s.pending[k])})
		delete(s.pending, k)
	}
}

// finish prints the output of tests that never ended (a crashed test
// binary), then the skip summary.
func (s *summary) finish() {
	for _, k := range s.order {
		for _, l := range s.pending[k] {
			fmt.Fprint(s.w, l)
		}
	}
	if len(s.skips) == 0 {
		fmt.Fprintf(s.w, "tests: %d passed, %d failed, none skipped\n", s.passed, s.failed)
		return
	}
	type group struct {
		reason string
		tests  []string
	}
	var groups []*group
	byReason := map[string]*group{}
	for _, sk := range s.skips {
		g := byReason[sk.reason]
		if g == nil {
			g = &group{reason: sk.reason}
			byReason[sk.reason] = g
			groups = append(groups, g)
		}
		g.tests = append(g.tests, sk.name)
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return len(b.tests) - len(a.tests) })
	fmt.Fprintf(s.w, "tests: %d passed, %d failed, %d skipped (%s):\n", s.passed, s.failed, len(s.skips),
		plural(len(groups), "reason"))
	for _, g := range groups {
		eg := g.tests[0]
		if len(g.tests) > 1 {
			eg += ", ..."
		}
		fmt.Fprintf(s.w, "  %3d  %s  (%s)\n", len(g.tests), g.reason, eg)
	}
}

// sharedRE is a skip that needs ../shared, the real traces and documents
// beside a CI checkout: one reason however each test words it.
var sharedRE = regexp.MustCompile(`\.\./shared\b`)

// location is the "file_test.go:12: " testing puts before a t.Skip message.
var location = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason is the message t.Skip printed: the test's output without the
// === and --- lines and the file:line prefix.
func skipReason(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		msg = append(msg, strings.TrimSpace(location.ReplaceAllString(l, "")))
	}
	r := strings.Join(msg, " ")
	switch {
	case r == "":
		return "no reason given"
	case sharedRE.MatchString(r):
		return "../shared is not beside the checkout (real PyTorch traces and documents outside the repository)"
	case len(r) > 160:
		return r[:157] + "..."
	}
	return r
}

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/memreplay/memreplay/")
}

func plural(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

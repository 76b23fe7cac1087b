package main

import (
	"strings"
	"testing"
)

// stream is go test -json's output (Go 1.26) for a package with a passing,
// a failing and two skipped tests, one of them for ../shared, and a
// package that failed to build.
const stream = `{"Action":"start","Package":"example.com/m/a"}
{"Action":"run","Package":"example.com/m/a","Test":"TestPass"}
{"Action":"output","Package":"example.com/m/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestPass","Output":"    a_test.go:5: chatter of a passing test\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"example.com/m/a","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"example.com/m/a","Test":"TestShared"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared","Output":"=== RUN   TestShared\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared","Output":"    a_test.go:9: ../shared/traces/pytorch not present: open x: no such file\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared","Output":"--- SKIP: TestShared (0.00s)\n"}
{"Action":"skip","Package":"example.com/m/a","Test":"TestShared","Elapsed":0}
{"Action":"run","Package":"example.com/m/a","Test":"TestShared2"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared2","Output":"=== RUN   TestShared2\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared2","Output":"    a_test.go:19: real trace ../shared/traces/pytorch/x.pickle not present\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestShared2","Output":"--- SKIP: TestShared2 (0.00s)\n"}
{"Action":"skip","Package":"example.com/m/a","Test":"TestShared2","Elapsed":0}
{"Action":"run","Package":"example.com/m/a","Test":"TestBrowser"}
{"Action":"output","Package":"example.com/m/a","Test":"TestBrowser","Output":"=== RUN   TestBrowser\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestBrowser","Output":"    a_test.go:12: browser test skipped: no chromium\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestBrowser","Output":"--- SKIP: TestBrowser (0.00s)\n"}
{"Action":"skip","Package":"example.com/m/a","Test":"TestBrowser","Elapsed":0}
{"Action":"run","Package":"example.com/m/a","Test":"TestFail"}
{"Action":"output","Package":"example.com/m/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestFail","Output":"    a_test.go:15: got 1, want 2\n"}
{"Action":"output","Package":"example.com/m/a","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"example.com/m/a","Test":"TestFail","Elapsed":0}
{"Action":"output","Package":"example.com/m/a","Output":"FAIL\n"}
{"Action":"output","Package":"example.com/m/a","Output":"FAIL\texample.com/m/a\t0.004s\n"}
{"Action":"fail","Package":"example.com/m/a","Elapsed":0.004}
{"ImportPath":"example.com/m/b [example.com/m/b.test]","Action":"build-output","Output":"b/b.go:3:1: syntax error: non-declaration statement outside function body\n"}
{"ImportPath":"example.com/m/b [example.com/m/b.test]","Action":"build-fail"}
{"Action":"start","Package":"example.com/m/c"}
{"Action":"output","Package":"example.com/m/c","Output":"PASS\n"}
{"Action":"output","Package":"example.com/m/c","Output":"ok  \texample.com/m/c\t0.003s\n"}
{"Action":"pass","Package":"example.com/m/c","Elapsed":0.003}
`

func TestSummaryShowsFailuresAndCountsSkips(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	s.finish()
	got := out.String()
	for _, want := range []string{
		"    a_test.go:15: got 1, want 2\n--- FAIL: TestFail (0.00s)\n", // a failure's output, as go test shows it
		"FAIL\texample.com/m/a\t0.004s\n",
		"b/b.go:3:1: syntax error", // a build error
		"ok  \texample.com/m/c\t0.003s\n",
		"tests: 1 passed, 1 failed, 3 skipped (2 reasons):\n",
		"    2  ../shared is not beside the checkout", // one reason however worded
		"(example.com/m/a.TestShared, ...)",
		"    1  browser test skipped: no chromium  (example.com/m/a.TestBrowser)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"chatter of a passing test", "PASS\n", "=== RUN"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q, which go test does not show:\n%s", not, got)
		}
	}
}

func TestSummaryWithoutSkips(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(`{"Action":"pass","Package":"p","Test":"TestA"}` + "\nnot json\n")); err != nil {
		t.Fatal(err)
	}
	s.finish()
	if want := "not json\ntests: 1 passed, 0 failed, none skipped\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// A test binary that crashes leaves tests without an end: their output is
// what says why.
func TestSummaryShowsOutputOfUnfinishedTests(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	in := `{"Action":"output","Package":"p","Test":"TestCrash","Output":"panic: boom\n"}` + "\n"
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	s.finish()
	if !strings.Contains(out.String(), "panic: boom\n") {
		t.Errorf("crash output lost: %q", out.String())
	}
}

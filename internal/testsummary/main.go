// Command testsummary runs `go test -json` with the arguments it is given,
// prints what plain `go test` would (each package's result, the output of
// every test that failed, build errors), and ends with a summary of the
// tests that were skipped and why. Plain `go test` says nothing of skips
// unless -v is given, and -v buries them in thousands of lines: a clone
// without ../shared beside it skips every test of the real traces, and
// without Chromium the browser test, and `make test` would pass without
// saying so.
//
// The exit status is go test's.
//
//	go run ./internal/testsummary -race -count=1 ./...
//
// The go command is $GO when set, else "go".
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	readErr := s.read(out)
	// Drain what is left so that go test never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	s.finish()
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		os.Exit(exit.ExitCode())
	case waitErr != nil:
		fmt.Fprintln(os.Stderr, "testsummary:", waitErr)
		os.Exit(2)
	case readErr != nil:
		os.Exit(2)
	}
}

// Command memreplay replays GPU memory traces through a PyTorch-exact
// caching allocator on a simulated or real GPU. Until the trace replayer
// lands it offers `demo`: the allocator on a built-in fine-tuning workload
// on a simulated 24 GiB GPU, under several allocator settings side by side.
//
// Exit codes: 0 ok; 1 the run worked but a check failed (with --fail-on-oom,
// an out-of-memory error); 2 bad usage or bad input.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
)

const usage = `memreplay: replay GPU memory traces through a PyTorch-exact caching allocator

Usage:
  memreplay demo [flags]     run the allocator on a built-in fine-tuning workload
  memreplay help [command]   show help

Run 'memreplay help demo' for the demo's flags and examples.
`

// usageError is bad usage: exit code 2.
type usageError struct{ error }

// checkFailed is a run whose check failed: exit code 1.
var errCheckFailed = errors.New("check failed")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = demoCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		if len(args) > 1 && args[1] == "demo" {
			_ = demoCmd([]string{"--help"}, stdout, stdout)
			return 0
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "memreplay: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "memreplay %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, errCheckFailed):
		return 1
	default:
		fmt.Fprintf(stderr, "memreplay %s: %v\n", args[0], err)
		return 2
	}
}

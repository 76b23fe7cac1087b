// Command memreplay replays GPU memory traces through a PyTorch-exact
// caching allocator on a simulated GPU: `replay` reports where the memory
// went (and with --check proves every decision matches the recording),
// `compare` runs several allocator settings side by side, `report` writes
// a self-contained HTML memory report, `inspect` says what a trace holds,
// `convert` writes memreplay's streaming trace format; `par` answers how
// many trials fit on one GPU at once, `trials` runs a whole HPO study on
// the simulated GPU with its between-trial policies as switches, `synth`
// generates the trace of one fine-tuning trial from its hyperparameters,
// and `demo` runs a few generated trials one after another.
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

	"github.com/memreplay/memreplay/internal/gcfloor"
)

const usage = `memreplay: replay GPU memory traces through a PyTorch-exact caching allocator

Usage:
  memreplay replay [flags] TRACE...  replay traces and report where the memory went
  memreplay compare [flags] TRACE    replay under several allocator settings side by side
  memreplay report [flags] TRACE... -o report.html
                                     write a self-contained HTML memory report
  memreplay inspect [flags] TRACE    say what a trace holds
  memreplay convert IN OUT           convert a trace to memreplay's format, or to a PyTorch snapshot
  memreplay par [flags] [TRACE...]   how many trials fit on one GPU at once (PAR)
  memreplay trials [flags]           run an HPO study on the simulated GPU
  memreplay synth [flags] -o OUT     generate one fine-tuning trial's trace
  memreplay estimate [flags] [TRACE] predict one trial's peak live and reserved memory
  memreplay demo [flags]             generated fine-tuning trials on a simulated GPU, no trace needed
  memreplay plan [flags] FILE.csv    place buffers with known lifetimes at the lowest peak
  memreplay help [command]           show help

TRACE is a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot),
an RMM logging_resource_adaptor CSV log, or a memreplay trace.
Run 'memreplay help COMMAND' for a command's flags and examples.

Exit codes: 0 ok; 1 a check failed (or an OOM with --fail-on-oom);
2 bad usage or bad input.
`

// usageError is bad usage: exit code 2.
type usageError struct{ error }

// checkFailed is a run whose check failed: exit code 1.
var errCheckFailed = errors.New("check failed")

// gcFloor is the heap below which the command does not collect
// (internal/gcfloor): a run on a small trace lives for tens of
// milliseconds and would otherwise collect every few MiB it allocates.
// Above it the collector paces as Go's default does. GOGC or GOMEMLIMIT
// in the environment overrides it.
const gcFloor = 64 << 20

func main() {
	gcfloor.Set(gcFloor)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	out := &checkedWriter{w: stdout}
	code := dispatch(args, out, stderr)
	if out.err != nil && code != 2 {
		// The answer did not reach its reader (a full disk under a
		// redirect, a closed pipe): as bad as a file that could not be
		// written.
		name := "memreplay"
		if len(args) > 0 {
			name += " " + args[0]
		}
		fmt.Fprintf(stderr, "%s: writing standard output: %v\n", name, out.err)
		return 2
	}
	return code
}

// checkedWriter keeps the first error of writes to standard output, which
// the commands' many prints do not each check.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	cmds := map[string]func([]string, io.Writer, io.Writer) error{
		"replay": replayCmd, "compare": compareCmd, "inspect": inspectCmd,
		"convert": convertCmd, "demo": demoCmd, "report": reportCmd,
		"par": parCmd, "trials": trialsCmd, "synth": synthCmd, "plan": planCmd,
		"estimate": estimateCmd,
	}
	switch cmd := cmds[args[0]]; {
	case cmd != nil:
		err = cmd(args[1:], stdout, commandStderr{Writer: stderr, stdout: stdout})
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		if len(args) > 1 {
			c := cmds[args[1]]
			if c == nil {
				fmt.Fprintf(stderr, "memreplay help: unknown command %q\n\n%s", args[1], usage)
				return 2
			}
			_ = c([]string{"--help"}, stdout, stdout)
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

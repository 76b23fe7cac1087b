package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/pflag"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// openTrace opens a trace file and readies it for replay: a trace read
// whole gets its initial state reconstructed and its capacity implied.
// also observes a snapshot pickle's events while it is imported
// (replay.OpenPrepared).
func openTrace(path string, also ...trace.EventObserver) (*trace.Opened, error) {
	o, _, err := replay.OpenPrepared(path, also...)
	if err != nil {
		return nil, openError(err)
	}
	return o, nil
}

// openError is the error of a trace that could not be opened: a missing
// or unreadable file is bad input, exit code 2, as bad content is.
func openError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return inputError{err}
	}
	return err
}

// replayableTwice refuses a trace that is not a regular file (a pipe, a
// FIFO, /dev/stdin) where cmd replays it runs times (compare's columns,
// report's settings): every replay opens the path, and the second one
// found a drained pipe and called it an empty file.
func replayableTwice(cmd, path string, runs int) error {
	if runs < 2 {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil // a missing file is the open's error
	}
	return inputError{fmt.Errorf("%s: not a regular file (a pipe or a FIFO), which %s would read %d times, once per setting: save it to a file first", path, cmd, runs)}
}

// inputError is bad input that is not a trace.FormatError (a missing file):
// exit code 2.
type inputError struct{ error }

// parseAllocConf parses an --alloc-conf value.
func parseAllocConf(s string) (*config.Config, error) {
	c, err := config.Parse(s)
	if err != nil {
		return nil, usageError{fmt.Errorf("--alloc-conf %q: %v", s, err)}
	}
	return &c, nil
}

// newFlagSet returns a subcommand's flag set. Its errors go to stderr;
// --help (the usage text, then the flags) is output the user asked for, so
// it goes to standard output when the command was started from the command
// line (dispatch's commandStderr says where that is), as `memreplay help
// CMD` does, and can be piped into a pager.
func newFlagSet(name, help string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	out := stderr
	if c, ok := stderr.(commandStderr); ok {
		out = c.stdout
	}
	fs.Usage = func() { fs.SetOutput(out); fmt.Fprint(out, help); fs.PrintDefaults() }
	return fs
}

// commandStderr is the stderr dispatch hands a command: stderr itself, and
// the stdout that help goes to. pflag calls Usage only for -h/--help under
// ContinueOnError (its errors are returned, not printed), so nothing else
// is redirected.
type commandStderr struct {
	io.Writer
	stdout io.Writer
}

// checkFormat checks a --format value of the report commands.
func checkFormat(format string) error {
	switch format {
	case "table", "json", "markdown":
		return nil
	}
	return usageError{fmt.Errorf("--format %q: want table, json or markdown", format)}
}

// eachEvent calls fn with every remaining event of r.
func eachEvent(r trace.Reader, fn func(*trace.Event) error) error {
	var e trace.Event
	for {
		err := r.Next(&e)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
}

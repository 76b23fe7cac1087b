package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/memreplay/memreplay/profiler/trace"
)

const convertHelp = `Usage: memreplay convert [flags] INPUT OUTPUT

Converts a PyTorch memory snapshot, an RMM log or a memreplay trace into a
memreplay trace: compressed, streamed on replay (memory bounded by live
blocks, not by trace length), with the state before a partial trace
reconstructed once and stored, and the capacity implied by its OOMs.
The format is documented in docs/trace-format.md.

Examples:
  memreplay convert snapshot.pickle snapshot.mrt
  memreplay convert rmm_log.csv run.mrt

Flags:
`

func convertCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("convert", convertHelp, stderr)
	quiet := fs.BoolP("quiet", "q", false, "print nothing on success")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 2 {
		return usageError{fmt.Errorf("want INPUT and OUTPUT, got %d arguments (see memreplay help convert)", fs.NArg())}
	}
	in, out := fs.Arg(0), fs.Arg(1)
	if abs1, _ := filepath.Abs(in); abs1 != "" {
		if abs2, _ := filepath.Abs(out); abs1 == abs2 {
			return usageError{fmt.Errorf("INPUT and OUTPUT are the same file")}
		}
	}
	o, err := openTrace(in)
	if err != nil {
		return err
	}
	defer o.Close()
	// Write to a temporary file beside the output and rename it, so that a
	// failure never leaves a truncated trace under the output's name.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".memreplay-convert-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := copyTrace(tmp, o.Reader)
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	if !*quiet {
		st, _ := os.Stat(out)
		var size int64
		if st != nil {
			size = st.Size()
		}
		fmt.Fprintf(stdout, "%s (%s) -> %s: %d events, %d bytes (%.1f bytes/event)\n", in, o.Format, out, n, size, float64(size)/float64(max(n, 1)))
	}
	return nil
}

// copyTrace streams r into a native trace on w and returns the events.
func copyTrace(w io.Writer, r trace.Reader) (int64, error) {
	tw, err := trace.NewWriter(w, r.Header())
	if err != nil {
		return 0, err
	}
	tw.SetStacks(r.Stacks())
	init, rec := r.Initial()
	if init != nil {
		if err := tw.SetInitial(init, rec); err != nil {
			return 0, err
		}
	}
	if err := eachEvent(r, func(e *trace.Event) error { return tw.WriteEvent(e, r.Stacks()) }); err != nil {
		return 0, err
	}
	if final, ok := r.Final(); ok {
		if err := tw.SetFinal(final); err != nil {
			return 0, err
		}
	}
	return tw.Events(), tw.Close()
}

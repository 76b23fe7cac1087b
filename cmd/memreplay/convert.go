package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/memreplay/memreplay/trace"
)

const convertHelp = `Usage: memreplay convert [flags] INPUT OUTPUT

Converts a PyTorch memory snapshot, an RMM log or a memreplay trace into a
memreplay trace: compressed, streamed on replay (memory bounded by live
blocks, not by trace length), with the state before a partial trace
reconstructed once and stored, and the capacity implied by its OOMs.
The format is documented in docs/trace-format.md.

When OUTPUT ends in .pickle or .pkl, it is written as a PyTorch memory
snapshot instead (what torch.cuda.memory._dump_snapshot writes), which
pytorch.org/memory_viz, pickle.load and memreplay itself open. memreplay's
own annotations become PyTorch's: trials and markers are user_defined
entries, empty_cache, stream_sync and record_stream are left out. A
snapshot's record_function annotations (external_annotations) are kept
by either format and written back as they were read. A trace without its
end state (a native trace recorded without one, an RMM log) gets an
empty segment list: memory_viz's Active Memory Timeline works, its
Allocator State History needs the end state, which 'memreplay replay
--record OUT.pickle TRACE' writes. See "Writing PyTorch snapshots" in
docs/trace-format.md.

Examples:
  memreplay convert snapshot.pickle snapshot.mrt
  memreplay convert rmm_log.csv run.mrt
  memreplay convert trial.mrt trial.pickle   # open in pytorch.org/memory_viz

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
	if isPickleName(out) {
		return convertToPickle(o, in, out, *quiet, stdout)
	}
	tmp, err := createOut(out)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", out, err)
	}
	defer tmp.abort()
	n, err := copyTrace(tmp, o.Reader)
	if err != nil {
		return err
	}
	if err := tmp.commit(); err != nil {
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
	// Annotations known before the events (a snapshot's, an annotated
	// .mrt's) go before them, where a reader has them at once; a native
	// file that keeps them after its events gives them at its end.
	ahead := trace.AnnotationsComplete(r)
	if ahead {
		if err := tw.WriteAnnotations(trace.AnnotationsOf(r)); err != nil {
			return 0, err
		}
	}
	if err := eachEvent(r, func(e *trace.Event) error { return tw.WriteEvent(e, r.Stacks()) }); err != nil {
		return 0, err
	}
	if !ahead {
		if err := tw.WriteAnnotations(trace.AnnotationsOf(r)); err != nil {
			return 0, err
		}
	}
	if final, ok := r.Final(); ok {
		if err := tw.SetFinal(final); err != nil {
			return 0, err
		}
	}
	return tw.Events(), tw.Close()
}

// isPickleName says whether OUTPUT names a PyTorch snapshot pickle.
func isPickleName(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pickle", ".pkl":
		return true
	}
	return false
}

// convertToPickle writes the trace as a PyTorch memory snapshot. A trace
// read whole (a pickle) is written from memory; a streamed one (a native
// trace) has its events spooled to disk beside OUT as they are read
// (trace.PyTorchSpool), since the pickle's end state comes first and a
// streamed trace gives it last: memory stays flat in the trace's length.
func convertToPickle(o *trace.Opened, in, out string, quiet bool, stdout io.Writer) error {
	var sum pickleSummary
	if t := o.Trace; t != nil {
		if err := trace.WritePyTorchFile(out, t); err != nil {
			return fmt.Errorf("cannot write %s: %w", out, err)
		}
		sum = pickleSummary{events: int64(len(t.Events)), final: t.Final, hasFinal: t.HasFinal, initial: t.Initial}
		for i := range t.Events {
			switch t.Events[i].Action {
			case trace.ActionEmptyCache, trace.ActionStreamSync, trace.ActionRecordStream:
				sum.left++
			}
		}
	} else {
		var err error
		if sum, err = spoolToPickle(o.Reader, out); err != nil {
			return err
		}
	}
	if quiet {
		return nil
	}
	var size int64
	if st, _ := os.Stat(out); st != nil {
		size = st.Size()
	}
	var state string
	switch {
	case sum.hasFinal:
		state = "end state of " + plural(len(sum.final), "segment")
	case sum.events == 0:
		state = "end state of " + plural(len(sum.initial), "segment") + " (the initial state)"
	default:
		state = "no end state in the input (empty segment list)"
	}
	entries := plural(int(sum.events-sum.left), "trace entry")
	if sum.annotations > 0 {
		entries += ", " + plural(int(sum.annotations), "external annotation")
	}
	fmt.Fprintf(stdout, "%s (%s) -> %s: PyTorch snapshot, %s, %s, %d bytes\n",
		in, o.Format, out, entries, state, size)
	if sum.left > 0 {
		fmt.Fprintf(stdout, "  %s with no PyTorch equivalent left out (empty_cache, stream_sync, record_stream)\n", plural(int(sum.left), "event"))
	}
	return nil
}

// pickleSummary is what convert says about a written snapshot.
type pickleSummary struct {
	events, left   int64 // left: events with no PyTorch entry
	annotations    int64 // external_annotations written
	final, initial []trace.Segment
	hasFinal       bool
}

// spoolToPickle streams r's events into a spool beside out, then writes
// the snapshot to out (through a temporary file renamed over it).
func spoolToPickle(r trace.Reader, out string) (pickleSummary, error) {
	f, err := createOut(out)
	if err != nil {
		return pickleSummary{}, fmt.Errorf("cannot write %s: %w", out, err)
	}
	defer f.abort()
	sp, err := trace.NewPyTorchSpool(spoolDir(out), r.Stacks())
	if err != nil {
		return pickleSummary{}, fmt.Errorf("cannot write %s: %w", out, err)
	}
	defer sp.Close()
	err = eachEvent(r, func(e *trace.Event) error {
		if err := sp.Add(e); err != nil {
			return fmt.Errorf("cannot write %s: %w", out, err)
		}
		return nil
	})
	if err != nil {
		return pickleSummary{}, err
	}
	init, rec := r.Initial()
	final, hasFinal := r.Final()
	t := &trace.Trace{Header: r.Header(), Stacks: r.Stacks(), Initial: init, InitialReconstructed: rec, Final: final, HasFinal: hasFinal,
		Annotations: trace.AnnotationsOf(r)}
	// Into the unnamed file: every error below is named once, here.
	bw := bufio.NewWriterSize(f.File, 1<<20)
	err = sp.WriteSnapshot(bw, t)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return pickleSummary{}, fmt.Errorf("cannot write %s: %w", out, err)
	}
	if err := f.commit(); err != nil {
		return pickleSummary{}, err
	}
	return pickleSummary{events: sp.Events(), left: sp.LeftOut(), annotations: sp.Annotations(), final: final, hasFinal: hasFinal, initial: init}, nil
}

// plural formats a count and a noun ("entry" -> "entries").
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/memreplay/memreplay/allocator/placement"
)

const planHelp = `Usage: memreplay plan [flags] FILE.csv
       memreplay plan [flags] --from-trace TRACE

Solves the offline placement problem: each buffer lives over [lower, upper)
and takes size bytes; plan gives every buffer an offset so that no two
buffers alive at the same time share a byte, with the peak address as low
as it can find. It reads google/minimalloc's CSV (header id,lower,upper,size
and optionally alignment; minimalloc's buffer/start/end names too) and
writes the same CSV with an offset column. The answer is checked (no two
buffers overlap in time and address, every offset aligned) before it is
printed, and compared with the lower bound, the largest sum of sizes alive
at one time: when the peak equals it, or the search proves nothing lower
fits, the placement is optimal and plan says so.

With --from-trace, the buffers are the blocks of a memory trace (any format
replay reads): each alloc .. free_completed of one device is a buffer
(the blocks alive before the first event live from time 0, blocks never
freed to the end), the clock is the event index, and sizes are rounded up
to 512 bytes as PyTorch's blocks are. This plans a recorded run's tensors
in one arena: its peak against the trace's peak live bytes is what planned
placement can save (docs/plan.md).

The summary (peak, lower bound, buffers, time) goes to stderr unless -q;
--format json prints {"peak_bytes", "lower_bound_bytes", "optimal",
"buffers", "seconds", "offsets", ...} instead of the CSV.

Examples:
  memreplay plan problem.csv > solution.csv
  memreplay plan --format json --time-limit 10s problem.csv
  memreplay plan --from-trace snapshot.pickle -o buffers.csv

Flags:
`

// solvePlacement is the solver plan runs; a test swaps in a wrong one to
// see the verification refuse its answer.
var solvePlacement = placement.Solve

// planResult is plan's JSON output; its form is stable.
type planResult struct {
	File       string   `json:"file"`
	PeakBytes  uint64   `json:"peak_bytes"`
	LowerBound uint64   `json:"lower_bound_bytes"`
	Proven     uint64   `json:"proven_bound_bytes"`
	Optimal    bool     `json:"optimal"`
	Buffers    int      `json:"buffers"`
	Seconds    float64  `json:"seconds"`
	Nodes      int64    `json:"search_nodes"`
	Offsets    []uint64 `json:"offsets"`
}

func planCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", planHelp, stderr)
	format := fs.String("format", "csv", "output: csv (the input with an offset column) or json")
	out := fs.StringP("output", "o", "", "write the output to this file instead of stdout")
	timeLimit := fs.Duration("time-limit", time.Minute, "stop searching for a better placement after this long (0: no limit)")
	nodeLimit := fs.Int64("node-limit", 0, "stop searching after this many nodes (0: the solver's default, negative: heuristics only)")
	fromTrace := fs.String("from-trace", "", "plan the blocks of this memory trace instead of a CSV")
	device := fs.Int32("device", -1, "with --from-trace: the device whose blocks to plan (-1: the only device with blocks)")
	quiet := fs.BoolP("quiet", "q", false, "print no summary on stderr")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if *format != "csv" && *format != "json" {
		return usageError{fmt.Errorf("--format %q: want csv or json", *format)}
	}
	if *timeLimit < 0 {
		return usageError{fmt.Errorf("--time-limit %v: want 0 (no limit) or more", *timeLimit)}
	}
	var path string
	switch {
	case *fromTrace != "" && fs.NArg() == 0:
		path = *fromTrace
	case *fromTrace == "" && fs.NArg() == 1:
		path = fs.Arg(0)
	case *fromTrace != "":
		return usageError{fmt.Errorf("--from-trace takes the trace; want no other argument, got %d (see memreplay help plan)", fs.NArg())}
	default:
		return usageError{fmt.Errorf("want one CSV file, got %d arguments (see memreplay help plan)", fs.NArg())}
	}
	if *fromTrace == "" && fs.Changed("device") {
		return usageError{fmt.Errorf("--device goes with --from-trace")}
	}
	if *out != "" {
		if err := canWrite("-o", *out); err != nil {
			return err
		}
	}

	var bufs []placement.Buffer
	var err error
	if *fromTrace != "" {
		bufs, err = traceBuffers(path, *device)
	} else {
		bufs, err = readPlanCSV(path)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	sol, err := solvePlacement(bufs, placement.Options{TimeLimit: *timeLimit, NodeLimit: *nodeLimit})
	if err != nil {
		return inputError{fmt.Errorf("%s: %w", path, err)}
	}
	secs := time.Since(start).Seconds()
	// A placement that does not verify is the solver's bug: say so, never print it.
	if peak, err := placement.Verify(bufs, sol.Offsets); err != nil || peak != sol.Peak {
		return fmt.Errorf("%s: internal error, the placement found does not verify (peak %d, verified %d): %v; please report it with this file",
			path, sol.Peak, peak, err)
	}

	w := stdout
	var of *outFile
	if *out != "" {
		if of, err = createOutFor("-o", *out); err != nil {
			return err
		}
		defer of.abort()
		w = of
	}
	if *format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(planResult{File: path, PeakBytes: sol.Peak, LowerBound: sol.LowerBound, Proven: sol.Proven,
			Optimal: sol.Optimal, Buffers: len(bufs), Seconds: secs, Nodes: sol.Nodes, Offsets: sol.Offsets})
	} else {
		err = placement.WriteCSV(w, bufs, sol.Offsets)
	}
	if err == nil && of != nil {
		err = of.commit()
	}
	if err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	if !*quiet {
		fmt.Fprintln(stderr, planSummary(sol, len(bufs), secs))
	}
	return nil
}

// planSummary is the one line plan prints on stderr.
func planSummary(sol placement.Solution, n int, secs float64) string {
	verdict := "optimal"
	switch {
	case sol.Peak == 0:
	case !sol.Optimal:
		verdict = fmt.Sprintf("not proven optimal: %.2f%% above the lower bound, at most %.2f%% above the optimum",
			100*(float64(sol.Peak)/float64(sol.LowerBound)-1), 100*(float64(sol.Peak)/float64(sol.Proven)-1))
	case sol.Peak == sol.LowerBound:
		verdict = "optimal: the lower bound"
	default:
		verdict = fmt.Sprintf("optimal: proven by search, %.2f%% above the live-bytes bound",
			100*(float64(sol.Peak)/float64(sol.LowerBound)-1))
	}
	return fmt.Sprintf("plan: %d buffers, peak %d bytes, lower bound %d bytes (%s), %.3f s", n, sol.Peak, sol.LowerBound, verdict, secs)
}

// readPlanCSV reads a problem file; bad input is an error naming the
// file, the line and the column (exit 2).
func readPlanCSV(path string) ([]placement.Buffer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, inputError{err}
	}
	defer f.Close()
	bufs, _, err := placement.ReadCSV(f, path)
	if err != nil {
		return nil, inputError{err}
	}
	return bufs, nil
}

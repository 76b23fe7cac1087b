package main

import (
	"fmt"
	"io"

	"github.com/memreplay/memreplay/profiler/report"
)

const compareHelp = `Usage: memreplay compare [flags] TRACE --alloc-conf CONF [--alloc-conf CONF ...]

Replays one trace under several allocator settings and prints them side by
side: peak reserved, waste, fragmentation, retries, OOMs and device calls.
The first column is the trace's own settings unless --no-recorded is given.
--device cuda[:N] replays each setting on the real GPU instead of the
simulated one, one after the other, freeing the GPU between them (see
'memreplay help replay').

Examples:
  memreplay compare snapshot.pickle --alloc-conf expandable_segments:True
  memreplay compare trace.mrt --capacity 24GiB \
      --alloc-conf max_split_size_mb:128 \
      --alloc-conf garbage_collection_threshold:0.8,max_split_size_mb:128 \
      --alloc-conf expandable_segments:True
  memreplay compare snapshot.pickle --alloc-conf expandable_segments:True --html compare.html
  memreplay compare --device cuda snapshot.pickle --alloc-conf expandable_segments:True   # on the real GPU 0, measured call time

Flags:
`

func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", compareHelp, stderr)
	var rf replayFlags
	rf.register(fs)
	confs := fs.StringArray("alloc-conf", nil, "PYTORCH_CUDA_ALLOC_CONF settings to compare (repeatable)")
	noRecorded := fs.Bool("no-recorded", false, "leave out the trace's own settings")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Errorf("want one trace file, got %d arguments (see memreplay help compare)", fs.NArg())}
	}
	if rf.format == "markdown" {
		return usageError{fmt.Errorf("--format markdown: compare prints table or json")}
	}
	path := fs.Arg(0)
	base, err := rf.options(path)
	if err != nil {
		return err
	}
	var labels []string
	var runs []struct {
		label string
		conf  *string
	}
	if !*noRecorded {
		runs = append(runs, struct {
			label string
			conf  *string
		}{"recorded settings", nil})
	}
	for i := range *confs {
		c := (*confs)[i]
		label := c
		if label == "" {
			label = "defaults"
		}
		runs = append(runs, struct {
			label string
			conf  *string
		}{label, &c})
	}
	if len(runs) < 2 && *noRecorded || len(runs) == 0 {
		return usageError{fmt.Errorf("nothing to compare: give --alloc-conf at least once")}
	}
	if rf.html != "" {
		if err := canWrite("--html", rf.html); err != nil {
			return err
		}
	}
	// Parse every setting before the first replay, so that a typo in the
	// last one does not cost the time of the others.
	for _, r := range runs {
		if r.conf != nil {
			if _, err := parseAllocConf(*r.conf); err != nil {
				return err
			}
		}
	}
	var rows []report.CompareRow
	var page report.HTMLReport
	for _, r := range runs {
		opts := base
		if r.conf != nil {
			opts.Config, _ = parseAllocConf(*r.conf)
		}
		in, err := replayOnce(path, opts, &rf, stderr)
		if err != nil {
			return err
		}
		labels = append(labels, r.label)
		rows = append(rows, report.CompareRow{Label: r.label, Result: in.Result, Profile: in.Profile})
		in.Top = rf.sites()
		namedTrace(in, path)
		page.Runs = append(page.Runs, report.HTMLRun{Label: r.label, Input: in})
	}
	if rf.html != "" {
		if err := writeHTML(rf.html, &page); err != nil {
			return err
		}
	}
	if rf.format == "json" {
		return report.WriteCompareJSON(stdout, rows)
	}
	return report.WriteCompareTable(stdout, rows)
}

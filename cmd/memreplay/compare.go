package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/memreplay/memreplay/allocator"

	"github.com/memreplay/memreplay/profiler/report"
)

const compareHelp = `Usage: memreplay compare [flags] TRACE --alloc-conf CONF [--alloc-conf CONF ...] [--policy NAME ...]

Replays one trace under several allocator settings and policies and prints
them side by side: peak live and reserved, waste, fragmentation, retries,
OOMs, device calls and the allocator's mean time per malloc. The first
column is the trace's own settings unless --no-recorded is given. Each
--policy adds a column replayed with that policy under the trace's
settings, or with NAME:CONF under CONF (lifetime:expandable_segments:True);
see 'memreplay help replay' and "Policies" in docs/allocator.md.
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
  memreplay compare snapshot.pickle --alloc-conf expandable_segments:True --policy stitch --policy lifetime
  memreplay compare --device cuda snapshot.pickle --alloc-conf expandable_segments:True   # on the real GPU 0, measured call time

Flags:
`

func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", compareHelp, stderr)
	var rf replayFlags
	rf.register(fs)
	confs := fs.StringArray("alloc-conf", nil, "PYTORCH_CUDA_ALLOC_CONF settings to compare (repeatable)")
	policies := fs.StringArray("policy", nil, "also compare this allocator policy, under the trace's settings, or NAME:CONF under those (repeatable): "+strings.Join(allocator.PolicyNames(), ", "))
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
	var runs []policyRun
	if !*noRecorded {
		runs = append(runs, policyRun{label: "recorded settings"})
	}
	// Parse every setting before the first replay, so that a typo in the
	// last one does not cost the time of the others.
	for _, c := range *confs {
		label := c
		if label == "" {
			label = "defaults"
		}
		conf, err := parseAllocConf(c)
		if err != nil {
			return err
		}
		runs = append(runs, policyRun{label: label, conf: conf})
	}
	for _, p := range *policies {
		r, err := parsePolicyRun(p)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	if len(runs) < 2 && *noRecorded || len(runs) == 0 {
		return usageError{fmt.Errorf("nothing to compare: give --alloc-conf or --policy at least once")}
	}
	if err := replayableTwice("compare", path, len(runs)); err != nil {
		return err
	}
	if rf.html != "" {
		if err := canWrite("--html", rf.html); err != nil {
			return err
		}
	}
	var rows []report.CompareRow
	var page report.HTMLReport
	for _, r := range runs {
		opts := base
		opts.Config, opts.Policy = r.conf, r.policy
		opts.TimeMallocs = true
		in, err := replayOnce(path, opts, &rf, stderr)
		if err != nil {
			return err
		}
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

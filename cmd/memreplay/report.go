package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler/report"
)

const reportHelp = `Usage: memreplay report [flags] TRACE... -o report.html

Replays each trace (under its own settings, under every --alloc-conf and
with every --policy; the page shows each run's policy) and writes one self-contained HTML page: the timeline of live, requested
and reserved bytes with OOMs and retries marked (drag to zoom), the segment
map at the peak and at each OOM (hover a block for its size and stack), the
allocation sites by live bytes and by waste, and the settings side by side.
The page needs no network; open it from disk in any browser.

With --svg DIR, the page is also rendered in headless Chromium and each
chart is written to DIR as a standalone SVG file (the docs' figures).

Examples:
  memreplay report snapshot.pickle -o report.html
  memreplay report snapshot.pickle --alloc-conf expandable_segments:True -o report.html
  memreplay report snapshot.pickle --policy stitch --policy lifetime -o policies.html
  memreplay report trial1.mrt trial2.mrt --capacity 24GiB --oom skip -o trials.html
  memreplay report snapshot.pickle -o docs/img/report.html --svg docs/img

Flags:
`

func reportCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", reportHelp, stderr)
	var rf replayFlags
	fs.StringVar(&rf.capacity, "capacity", "", "device memory, e.g. 24GiB or rtx-24gb (default: the trace's; else implied by its OOMs; else not limited)")
	fs.StringVar(&rf.oom, "oom", "stop", "on an OOM the recording did not have: stop, skip (the allocation and its frees) or drop-trial")
	fs.BoolVar(&rf.lenient, "lenient", false, "count and skip bad events (free of an unknown address, double free, a device out of range) instead of failing")
	fs.IntVar(&rf.top, "top", 10, "allocation sites to list (0: all of them)")
	fs.BoolVar(&rf.progress, "progress", true, "show progress on stderr when it is a terminal")
	fs.BoolVar(&rf.noColor, "no-color", false, "accepted for scripts (the command prints no colour)")
	out := fs.StringP("output", "o", "", "the HTML file to write")
	confs := fs.StringArray("alloc-conf", nil, "also replay under these PYTORCH_CUDA_ALLOC_CONF settings (repeatable)")
	policies := fs.StringArray("policy", nil, "also replay with this allocator policy, under each trace's settings, or NAME:CONF under those (repeatable): "+strings.Join(allocator.PolicyNames(), ", "))
	noRecorded := fs.Bool("no-recorded", false, "leave out each trace's own settings (needs --alloc-conf)")
	title := fs.String("title", "", "the page's title (default: memreplay report and the trace)")
	svgDir := fs.String("svg", "", "also write each chart as an SVG file into this directory (renders in headless Chromium)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() == 0 {
		return usageError{fmt.Errorf("want at least one trace file (see memreplay help report)")}
	}
	if *out == "" {
		return usageError{fmt.Errorf("-o: give the HTML file to write")}
	}
	if err := canWrite("-o", *out); err != nil {
		return err
	}
	if *noRecorded && len(*confs) == 0 && len(*policies) == 0 {
		return usageError{fmt.Errorf("--no-recorded: nothing left to replay without --alloc-conf or --policy")}
	}
	rf.format = "table"
	var settings []policyRun
	if !*noRecorded {
		settings = append(settings, policyRun{label: "recorded settings"})
	}
	for _, c := range *confs {
		conf, err := parseAllocConf(c)
		if err != nil {
			return err
		}
		label := c
		if label == "" {
			label = "defaults"
		}
		settings = append(settings, policyRun{label: label, conf: conf})
	}
	for _, p := range *policies {
		r, err := parsePolicyRun(p)
		if err != nil {
			return err
		}
		settings = append(settings, r)
	}
	page := report.HTMLReport{Title: *title}
	for _, path := range fs.Args() {
		if err := replayableTwice("report", path, len(settings)); err != nil {
			return err
		}
	}
	for _, path := range fs.Args() {
		base, err := rf.options(path)
		if err != nil {
			return err
		}
		base.Name = path
		rf.samples, rf.detail = report.HTMLTimelineSamples, report.HTMLDetailEvents
		for _, s := range settings {
			opts := base
			opts.Config, opts.Policy = s.conf, s.policy
			in, err := replayOnce(path, opts, &rf, stderr)
			if err != nil {
				return err
			}
			in.Top = rf.sites()
			namedTrace(in, path)
			label := s.label
			if fs.NArg() > 1 {
				label = filepath.Base(path) + " · " + label
			}
			page.Runs = append(page.Runs, report.HTMLRun{Label: label, Input: in})
		}
	}
	if err := writeHTML(*out, &page); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%d run", *out, len(page.Runs))
	if len(page.Runs) != 1 {
		fmt.Fprint(stdout, "s")
	}
	fmt.Fprintln(stdout, ")")
	if *svgDir != "" {
		return writeFigures(*out, *svgDir, stdout)
	}
	return nil
}

// writeFigures renders the page in headless Chromium and writes each
// chart into dir as NAME.svg.
func writeFigures(page, dir string, stdout io.Writer) error {
	browser, err := report.FindChromium()
	if err != nil {
		return fmt.Errorf("--svg: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dom, err := report.RenderHTML(ctx, browser, page, report.RenderOptions{})
	if err != nil {
		return fmt.Errorf("--svg: %v", err)
	}
	sc, err := report.ParseSelfCheck(dom)
	if err != nil {
		return fmt.Errorf("--svg: %v", err)
	}
	if len(sc.Errors) > 0 {
		return fmt.Errorf("--svg: the page logged errors: %s", strings.Join(sc.Errors, "; "))
	}
	figs, err := report.ExtractFigures(dom)
	if err != nil {
		return fmt.Errorf("--svg: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(figs))
	for n := range figs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n+".svg")
		if err := writeFile(p, figs[n]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	return nil
}

// writeHTML writes an HTML report to path.
func writeHTML(path string, r *report.HTMLReport) error {
	f, err := createOut(path)
	if err != nil {
		return inputError{fmt.Errorf("cannot write %s: %w", path, err)}
	}
	defer f.abort()
	if err := report.WriteHTML(f, r); err != nil {
		return err
	}
	return f.commit()
}

// namedTrace names the trace in the reports by the path it was read from,
// as given on the command line, whatever its header records: a snapshot's
// importer records that path, a memreplay trace nothing or the file it was
// converted from, and one report of several inputs must name each alike.
func namedTrace(in *report.Input, path string) {
	in.Trace.SourceFile = path
}

// runLabel names a single replay's run on the page: its settings.
func runLabel(in *report.Input) string {
	if in.Result == nil {
		return "replay"
	}
	if c := in.Result.Config.String(); c != "" {
		return c
	}
	return "defaults"
}

package report

// The HTML report.
//
// WriteHTML writes one self-contained file: the page skeleton, the style
// sheet and the script (assets/, embedded with go:embed and inlined), and
// the data of every run as one JSON document in a <script
// type="application/json"> element. Nothing is fetched: the file opens
// from disk, offline, and can be mailed or attached to a bug.
//
// # Division of work
//
// Go decides every number; the script only draws. The data of a run is
// the JSON report itself (buildJSON: the object `replay --format json`
// prints, so the page and the JSON cannot disagree, and a test checks
// that they do not), plus what the JSON leaves out for size: the timeline
// as columns, the segment layout of each capture (profiler.Capture.Layout:
// the peak and the OOMs that have a capture), the retry events, and the
// frames of the sites the page names. Sizes are printed by the script with
// PyTorch's format_size rule, ties included, so the page shows the same
// digits as the terminal table.
//
// The script draws inline SVG: the timeline of live (allocated),
// requested and reserved bytes over events, or over recorded time when
// the trace has it, with OOMs, alloc retries and the peak marked; the
// segment map of each capture; the settings side by side as bars; the
// sites by live bytes and by waste as tables; and, when a PARSection is
// given, OOM probability and throughput against the number of parallel
// trials.
//
// # Large traces
//
// The profiler keeps at most Options.MaxSamples timeline samples, each
// with the maxima over its interval, so no peak is lost however long the
// trace; the CLI asks for HTMLTimelineSamples of them when it writes HTML.
// The script draws at most two points (the interval's minimum and
// maximum) per pixel column of the visible range, and dragging across a
// chart zooms in: the visible range is redrawn from all the samples in it.
// Around the peak of live bytes the profiler also keeps the state after
// every event for HTMLDetailEvents events (profiler.Options.DetailEvents),
// and the page puts those points in place of the samples there, so that
// zooming into the peak shows each allocation. The page's size is bounded
// by the two counts, not by the trace's length.
// Segment maps merge nothing but stop after MaxMapBlocks blocks (the page
// says so).
//
// # Checking the page
//
// After drawing, the script writes a self-check into
// #memreplay-selfcheck: for each chart the series drawn and their points,
// read back from the DOM, and every error raised or logged. The browser
// test (html_browser_test.go) loads the page in headless Chromium, reads
// the self-check from the dumped DOM and asserts on it; `memreplay report
// --svg DIR` uses the same rendering to write each chart as a standalone
// SVG file (the figures in docs/img), so the docs show exactly what the
// page draws.

import (
	_ "embed"
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/memreplay/memreplay/profiler"
)

//go:embed assets/report.html
var htmlPage string

//go:embed assets/report.css
var htmlCSS string

//go:embed assets/report.js
var htmlJS string

// HTMLTimelineSamples is the timeline length (profiler.Options.MaxSamples)
// to record when the profile will be drawn as HTML: enough to zoom into a
// long trace; the page draws at most two points per pixel whatever the
// count.
const HTMLTimelineSamples = 20000

// HTMLDetailEvents is the window around the peak of live bytes that the
// profiler keeps at every event (profiler.Options.DetailEvents) when the
// profile will be drawn as HTML: zoomed into the peak, the page shows each
// allocation and free however long the trace, for a fixed 40 bytes an
// event of the window in the profiler and about as much in the page.
const HTMLDetailEvents = 16384

// MaxMapBlocks bounds the blocks of one segment map, so that a capture of
// a huge state keeps the page responsive.
const MaxMapBlocks = 200000

// HTMLReport is what WriteHTML draws.
type HTMLReport struct {
	// Title heads the page; empty: "memreplay report" and the traces.
	Title string
	// Runs are the replays, each with a label: one trace under several
	// settings, or several traces. Each Input's Profile should come from
	// a profiler (without one, the page has figures but no timeline or
	// segment map).
	Runs []HTMLRun
	// PAR, when set, adds the parallel-trials section.
	PAR *PARSection
}

// HTMLRun is one replay of the report.
type HTMLRun struct {
	Label string
	Input *Input
}

// PARSection is the parallel-trials result the page draws: for each
// setting (an allocator configuration or a worker policy) and each PAR
// level K, the probability that a trial runs out of memory and the
// throughput. NaN marks a combination that was not measured.
type PARSection struct {
	// Title is a sentence above the charts (the workload, the GPU).
	Title    string
	Settings []string
	K        []int
	// POOM[i][j] is setting i at K[j], between 0 and 1.
	POOM [][]float64
	// Throughput[i][j] is setting i at K[j], in ThroughputUnit.
	Throughput     [][]float64
	ThroughputUnit string
	// Saturation, when set, is per setting the PAR level at which memory
	// saturates (0: none within K).
	Saturation []int
	Notes      []string
}

// WriteHTML writes the report as one self-contained HTML page.
func WriteHTML(w io.Writer, r *HTMLReport) error {
	d, err := buildHTMLData(r)
	if err != nil {
		return err
	}
	// The document escapes <, > and & in strings as encoding/json does, so
	// it cannot close its <script> element early.
	// Checked before the page's first byte: an error writes nothing.
	if err := finiteData(d); err != nil {
		return err
	}
	titleText, subtitle := htmlTitles(r)
	return writeFilled(w, htmlPage, map[string]func(io.Writer) error{
		"{{TITLE}}":    text(html.EscapeString(titleText)),
		"{{SUBTITLE}}": text(html.EscapeString(subtitle)),
		"{{CSS}}":      text(htmlCSS),
		"{{JS}}":       text(htmlJS),
		"{{DATA}}":     func(w io.Writer) error { return writeData(w, d) },
	})
}

// text is a value for writeFilled: s as it is.
func text(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// writeFilled writes page with each {{NAME}} in it replaced by what
// fill's function writes, as strings.Replacer would, but piece by piece
// into w: the page and its data (megabytes for a long trace) are not
// copied into one string first. A {{ that starts no key in fill is written
// as it is.
func writeFilled(w io.Writer, page string, fill map[string]func(io.Writer) error) error {
	for page != "" {
		i := strings.Index(page, "{{")
		j := strings.Index(page[max(i, 0):], "}}")
		if i < 0 || j < 0 {
			_, err := io.WriteString(w, page)
			return err
		}
		end := i + j + 2
		v, ok := fill[page[i:end]]
		if !ok {
			end = i + 2
			v = text(page[i:end])
		}
		if _, err := io.WriteString(w, page[:i]); err != nil {
			return err
		}
		if err := v(w); err != nil {
			return err
		}
		page = page[end:]
	}
	return nil
}

func htmlTitles(r *HTMLReport) (string, string) {
	var files []string
	seen := map[string]bool{}
	for _, run := range r.Runs {
		if run.Input == nil {
			continue
		}
		if l := traceLabel(run.Input.Trace); l != "" && !seen[l] {
			seen[l] = true
			files = append(files, l)
		}
	}
	t := r.Title
	if t == "" {
		t = "memreplay report"
		if len(files) == 1 {
			t += ": " + files[0]
		}
	}
	sub := fmt.Sprintf("%d run", len(r.Runs))
	if len(r.Runs) != 1 {
		sub += "s"
	}
	if len(files) > 0 {
		sub += " of " + strings.Join(files, ", ")
	}
	sub += "; replayed through the PyTorch-exact caching allocator on a simulated GPU"
	return t, sub
}

// validate checks the shape of a PAR section: one row per setting, one
// value per K, probabilities within [0, 1].
func (p *PARSection) validate() error {
	if len(p.K) == 0 || len(p.Settings) == 0 {
		return fmt.Errorf("report: PAR section needs at least one setting and one K")
	}
	check := func(name string, grid [][]float64, prob bool) error {
		if len(grid) != len(p.Settings) {
			return fmt.Errorf("report: PAR %s has %d rows for %d settings", name, len(grid), len(p.Settings))
		}
		for i, row := range grid {
			if len(row) != len(p.K) {
				return fmt.Errorf("report: PAR %s row %d (%s) has %d values for %d K", name, i, p.Settings[i], len(row), len(p.K))
			}
			for j, v := range row {
				if math.IsInf(v, 0) || (!math.IsNaN(v) && (v < 0 || prob && v > 1)) {
					return fmt.Errorf("report: PAR %s of %s at K=%d is %v", name, p.Settings[i], p.K[j], v)
				}
			}
		}
		return nil
	}
	if err := check("P(OOM)", p.POOM, true); err != nil {
		return err
	}
	if err := check("throughput", p.Throughput, false); err != nil {
		return err
	}
	if p.Saturation != nil && len(p.Saturation) != len(p.Settings) {
		return fmt.Errorf("report: PAR saturation has %d values for %d settings", len(p.Saturation), len(p.Settings))
	}
	return nil
}

// The site labels of captures come from the profile's site table.
func siteTable(prof *profiler.Profile) map[uint32]*profiler.Site {
	out := map[uint32]*profiler.Site{}
	if prof == nil {
		return out
	}
	for i := range prof.Sites {
		out[uint32(prof.Sites[i].Stack)] = &prof.Sites[i]
	}
	return out
}

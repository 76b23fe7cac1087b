package report

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
)

// A document is what WriteTable and WriteMarkdown both render: a title,
// tables, and lines of text (the check verdict, the OOMs, notes). Building
// it once keeps the two outputs saying the same thing.
type document struct {
	title    string
	sections []section
}

type section struct {
	title  string
	header []string
	rows   [][]string
	right  []bool // right-align column i (numbers)
	lines  []string
}

func buildDocument(in *Input) *document {
	in, idleNote := withoutIdleDevices(in)
	doc := &document{title: "memreplay replay"}
	if l := traceLabel(in.Trace); l != "" {
		doc.title += ": " + l
	}
	doc.sections = append(doc.sections, figuresSection(in))
	if s := sitesSection(in); s != nil {
		doc.sections = append(doc.sections, *s)
	}
	if s := checkSection(in); s != nil {
		doc.sections = append(doc.sections, *s)
	}
	if s := statsCheckSection(in); s != nil {
		doc.sections = append(doc.sections, *s)
	}
	if s := oomSection(in); s != nil {
		doc.sections = append(doc.sections, *s)
	}
	n := notesFor(in, true)
	if idleNote != "" {
		n = append(n, idleNote)
	}
	if len(n) > 0 {
		doc.sections = append(doc.sections, section{title: "Notes", lines: n})
	}
	return doc
}

// figuresSection is one column of values, or one per device and a total
// when the replay used several devices.
func figuresSection(in *Input) section {
	res, prof := in.Result, in.Profile
	type col struct {
		name string
		f    profiler.Figures
		cap  string
	}
	total := figures(res, prof)
	var cols []col
	if res != nil && len(res.Devices) > 1 {
		for i, d := range res.Devices {
			c := col{name: fmt.Sprintf("device %d", d.Index), cap: size(d.Capacity)}
			if dp := deviceProfile(prof, d.Index); dp != nil {
				c.f = dp.Figures
			} else {
				c.f = figures(&replay.Result{Devices: res.Devices[i : i+1]}, nil)
			}
			cols = append(cols, c)
		}
		cols = append(cols, col{name: "total", f: total})
	} else {
		c, src := capacity(res)
		capStr := size(c)
		switch {
		case src == "unknown":
			// The trace records no capacity and implies none: the
			// simulated device is too large to run out (--capacity
			// sets one).
			capStr = "not limited (the trace records none; --capacity sets one)"
			if res.Devices[0].UnusedCapacity != "" {
				capStr = "not limited (--check uses no implied capacity; --capacity sets one)"
			}
		case src != "":
			capStr += " (" + src + ")"
		}
		cols = []col{{name: "value", f: total, cap: capStr}}
	}
	s := section{header: []string{"figure"}}
	for _, c := range cols {
		s.header = append(s.header, c.name)
	}
	// global rows show their value in the last column only.
	global := func(name, v string) {
		row := make([]string, len(cols)+1)
		row[0], row[len(cols)] = name, v
		s.rows = append(s.rows, row)
	}
	per := func(name string, v func(c *col) string) {
		row := []string{name}
		for i := range cols {
			row = append(row, v(&cols[i]))
		}
		s.rows = append(s.rows, row)
	}
	if res != nil {
		ev := strconv.FormatInt(res.Events, 10)
		if res.Stopped {
			ev += fmt.Sprintf(" (stopped at event %d)", res.StoppedAt)
		}
		global("events", ev)
		global("config", configLabel(res))
		global("policy", policyName(res))
		if n := deviceNames(res); n != "" {
			global("device", n)
		}
	} else if prof != nil {
		global("events", strconv.FormatInt(prof.Events, 10))
	}
	per("capacity", func(c *col) string { return c.cap })
	per("peak live", func(c *col) string { return sizeAt(c.f.PeakLiveBytes, c.f.PeakLiveEvent) })
	per("peak reserved", func(c *col) string { return sizeAt(c.f.PeakReservedBytes, c.f.PeakReservedEvent) })
	per("waste (1 - live/reserved)", func(c *col) string { return percent(c.f.WasteRatio) })
	if prof != nil {
		per("reserved at peak live", func(c *col) string { return size(c.f.ReservedBytesAtPeak) })
		per("largest free block at peak", func(c *col) string { return size(c.f.LargestFreeBlockBytesAtPeak) })
		per("stranded at peak", func(c *col) string { return size(c.f.StrandedBytesAtPeak) })
		per("external fragmentation at peak", func(c *col) string { return percent(c.f.ExternalFragmentationAtPeak) })
		per("internal waste at peak", func(c *col) string { return size(c.f.InternalWasteBytesAtPeak) })
	}
	per("alloc retries", func(c *col) string { return strconv.FormatInt(c.f.AllocRetries, 10) })
	per("OOMs", func(c *col) string { return strconv.FormatInt(c.f.OOMs, 10) })
	if prof != nil {
		if len(cols) > 1 {
			// A row per call, as compare prints them: the four in one
			// cell made every device's column 50 characters wide.
			per("cudaMalloc", func(c *col) string { return strconv.FormatUint(c.f.DeviceMallocs, 10) })
			per("cudaFree", func(c *col) string { return strconv.FormatUint(c.f.DeviceFrees, 10) })
			per("cuMemMap", func(c *col) string { return strconv.FormatUint(c.f.DeviceMaps, 10) })
			per("cuMemUnmap", func(c *col) string { return strconv.FormatUint(c.f.DeviceUnmaps, 10) })
		} else {
			per("device calls", func(c *col) string { return deviceCalls(&c.f) })
		}
		per(deviceTimeLabel(total.DeviceTimeMeasured), func(c *col) string { return duration(c.f.DeviceTimeNS) })
	}
	return s
}

func sitesSection(in *Input) *section {
	sites := in.Profile
	if sites == nil || len(sites.Sites) == 0 {
		return nil
	}
	// The profile's order: bytes held at the peak, live plus stranded.
	n := min(in.top(), len(sites.Sites))
	s := &section{title: fmt.Sprintf("Top %d allocation sites at peak (ranked by live + stranded bytes)", n),
		header: []string{"#", "site", "live at peak", "stranded at peak", "allocs", "allocated"},
		right:  []bool{true, false, true, true, true, true}}
	names := siteNames(in, sites.Sites[:n])
	for i, st := range sites.Sites[:n] {
		s.rows = append(s.rows, []string{strconv.Itoa(i + 1), names[i], size(st.LiveBytesAtPeak),
			size(st.StrandedBytesAtPeak), strconv.FormatUint(st.AllocCount, 10), size(st.AllocBytes)})
	}
	return s
}

func checkSection(in *Input) *section {
	if in.Result == nil || in.Result.Check == nil {
		return nil
	}
	c := in.Result.Check
	if c.NothingToCheck {
		return &section{title: "Check", lines: []string{replay.NothingToCheckMessage}}
	}
	verdict := "PASSED"
	if !c.Passed() {
		verdict = "FAILED"
	}
	lines := []string{fmt.Sprintf("check %s: %d of %d decisions matched", verdict, c.DecisionsMatched, c.DecisionsExpected)}
	if d := c.FirstDivergence; d != nil {
		lines = append(lines, "first divergence: "+d.String())
	}
	switch {
	case c.FinalSegmentsMatch == nil:
		lines = append(lines, "final segments: not recorded in the trace")
	case *c.FinalSegmentsMatch:
		lines = append(lines, "final segments: match")
	default:
		lines = append(lines, "final segments: differ: "+c.FinalDifference)
	}
	return &section{title: "Check", lines: lines}
}

// statsCheckSection is replay --expect-stats: the verdict in the title,
// the differing keys as a table, then why the inferred ones may differ and
// which keys were left out.
func statsCheckSection(in *Input) *section {
	if in.Result == nil || in.Result.StatsCheck == nil {
		return nil
	}
	c := in.Result.StatsCheck
	verdict := "PASSED"
	if !c.Passed() {
		verdict = "FAILED"
	}
	s := &section{title: fmt.Sprintf("memory_stats() check %s: %d of %d exact keys match (%s, device %d)",
		verdict, c.ExactMatched, c.Exact, c.File, c.Device)}
	if c.Exact == 0 {
		s.lines = append(s.lines, "no key of the file is one the trace determines")
	}
	if c.Stopped {
		s.lines = append(s.lines, "the replay stopped early (out of memory): its statistics are not the trace's end")
	}
	if len(c.Differences) > 0 {
		s.header = []string{"key", "memory_stats()", "replay", "standard"}
		s.right = []bool{false, true, true, false}
		for _, d := range c.Differences {
			std := "exact"
			if !d.Exact {
				std = "inferred"
			}
			s.rows = append(s.rows, []string{d.Key, strconv.FormatInt(d.Recorded, 10), strconv.FormatInt(d.Replayed, 10), std})
		}
	}
	if c.Inferred > 0 {
		l := fmt.Sprintf("inferred keys: %d of %d match", c.InferredMatched, c.Inferred)
		var whys []string
		for _, d := range c.Differences {
			if !d.Exact && !slices.Contains(whys, d.Why) {
				whys = append(whys, d.Why)
			}
		}
		if len(whys) > 0 {
			l += " (a difference there does not fail the check: " + strings.Join(whys, "; ") + ")"
		}
		s.lines = append(s.lines, l)
	}
	if len(c.NotCompared) > 0 {
		byWhy := map[string]int{}
		var order []string
		for _, k := range c.NotCompared {
			if byWhy[k.Why] == 0 {
				order = append(order, k.Why)
			}
			byWhy[k.Why]++
		}
		for _, why := range order {
			n := fmt.Sprintf("%d keys", byWhy[why])
			if byWhy[why] == 1 {
				n = "1 key"
			}
			s.lines = append(s.lines, fmt.Sprintf("not compared: %s (%s)", n, why))
		}
	}
	return s
}

const maxOOMLines = 5

func oomSection(in *Input) *section {
	if in.Result == nil || len(in.Result.OOMs) == 0 {
		return nil
	}
	var lines []string
	for i, o := range in.Result.OOMs {
		if i == maxOOMLines {
			lines = append(lines, fmt.Sprintf("... and %d more", len(in.Result.OOMs)-maxOOMLines))
			break
		}
		l := fmt.Sprintf("event %d, device %d: %s requested", o.Index, o.Device, size(o.Size))
		if o.Recorded {
			l += " (the recording failed here too)"
		}
		if st := oomSnapshot(in.Profile, o); st != nil {
			l += fmt.Sprintf("; %s reserved, %s live, largest free block %s of %s free (fragmentation %s)",
				size(st.ReservedBytes), size(st.LiveBytes), size(st.LargestFreeBlockBytes), size(st.FreeBytes),
				percent(st.ExternalFragmentation))
		}
		lines = append(lines, l)
	}
	return &section{title: "Out of memory", lines: lines}
}

// WriteTable writes the human summary: the figures, the top sites, the
// check verdict, the OOMs and notes.
func WriteTable(w io.Writer, in *Input) error {
	doc := buildDocument(in)
	if _, err := fmt.Fprintln(w, doc.title); err != nil {
		return err
	}
	for _, s := range doc.sections {
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
		if s.title != "" {
			if _, err := fmt.Fprintln(w, s.title); err != nil {
				return err
			}
		}
		if s.header != nil {
			if err := renderTable(w, &s, false); err != nil {
				return err
			}
		}
		for _, l := range s.lines {
			if _, err := fmt.Fprintln(w, "  "+l); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteMarkdown writes the same summary as Markdown: headings, pipe tables
// and bullet lists.
func WriteMarkdown(w io.Writer, in *Input) error {
	doc := buildDocument(in)
	if _, err := fmt.Fprintf(w, "# %s\n", mdEscape(doc.title)); err != nil {
		return err
	}
	for _, s := range doc.sections {
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
		if s.title != "" {
			if _, err := fmt.Fprintf(w, "## %s\n\n", mdEscape(s.title)); err != nil {
				return err
			}
		}
		if s.header != nil {
			if err := renderTable(w, &s, true); err != nil {
				return err
			}
			if len(s.lines) > 0 {
				fmt.Fprintln(w)
			}
		}
		for _, l := range s.lines {
			if _, err := fmt.Fprintf(w, "- %s\n", mdEscape(l)); err != nil {
				return err
			}
		}
	}
	return nil
}

// renderTable draws a section's table with tablewriter: ASCII borders (the
// output goes to logs and CI as often as to terminals) or Markdown. Header
// auto-formatting is off because it upper-cases and rewrites the labels.
func renderTable(w io.Writer, s *section, markdown bool) error {
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRendition(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)}))
	}
	align := make(tw.Alignment, len(s.header))
	for i := range align {
		align[i] = tw.AlignLeft
		if i < len(s.right) && s.right[i] {
			align[i] = tw.AlignRight
		}
	}
	opts = append(opts, tablewriter.WithAlignment(align), tablewriter.WithHeaderAlignment(tw.AlignLeft))
	t := tablewriter.NewTable(w, opts...)
	header := s.header
	if markdown {
		header = mdCells(header)
	}
	t.Header(header)
	for _, r := range s.rows {
		if markdown {
			r = mdCells(r)
		}
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}

// mdEscape keeps text from being read as Markdown: tablewriter's Markdown
// renderer does not escape pipes, and site labels hold C++ templates and
// Python paths.
func mdEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '|', '\\', '*', '_', '`', '<', '>', '[', ']':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func mdCells(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = mdEscape(c)
	}
	return out
}

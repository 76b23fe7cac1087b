package study

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteJSON writes the reports as one JSON object {"studies": [...]}.
func WriteJSON(w io.Writer, reps []Report) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(struct {
		Studies []Report `json:"studies"`
	}{reps})
}

// WriteTable writes the reports side by side (one column per policy set),
// then each study's progression over its trials, as ASCII tables.
func WriteTable(w io.Writer, reps []Report) error { return write(w, reps, false) }

// WriteMarkdown is WriteTable in Markdown.
func WriteMarkdown(w io.Writer, reps []Report) error { return write(w, reps, true) }

func write(w io.Writer, reps []Report, md bool) error {
	if len(reps) == 0 {
		return nil
	}
	title := func(s string) {
		if md {
			fmt.Fprintf(w, "### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "%s\n", s)
		}
	}
	r0 := reps[0]
	same := true
	for _, r := range reps[1:] {
		same = same && r.Space == r0.Space && r.Sampler == r0.Sampler && r.Seed == r0.Seed &&
			r.Planned == r0.Planned && r.Capacity == r0.Capacity
	}
	if same {
		title(fmt.Sprintf("Study: %d trials from space %q (%s sampler, seed %d) on a %s GPU",
			r0.Planned, r0.Space, r0.Sampler, r0.Seed, gib(r0.Capacity)))
	} else {
		title("Studies")
	}
	header := []string{""}
	for i := range reps {
		if len(reps) == 1 {
			header = append(header, "study")
		} else {
			header = append(header, fmt.Sprintf("(%d)", i+1))
		}
	}
	rows := [][]string{}
	add := func(name string, f func(Report) string) {
		row := []string{name}
		for _, r := range reps {
			row = append(row, f(r))
		}
		rows = append(rows, row)
	}
	if len(reps) > 1 {
		for i, r := range reps {
			fmt.Fprintf(w, "%s(%d) %s\n", mdPrefix(md), i+1, r.Label)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "%sPolicies: %s\n\n", mdPrefix(md), r0.Label)
	}
	if !same {
		add("space (sampler, seed)", func(r Report) string { return fmt.Sprintf("%s (%s, %d)", r.Space, r.Sampler, r.Seed) })
		add("trials, GPU", func(r Report) string { return fmt.Sprintf("%d, %s", r.Planned, gib(r.Capacity)) })
	}
	add("completed", func(r Report) string { return count(r.Completed, r.Planned) })
	add("pruned (OOM)", func(r Report) string { return count(r.PrunedOOM, r.Planned) })
	add("pruned (estimate)", func(r Report) string { return count(r.PrunedEstimate, r.Planned) })
	add("failed (sticky error)", func(r Report) string { return count(r.Failed, r.Planned) })
	add("never ran", func(r Report) string {
		s := count(r.NotRun, r.Planned)
		switch {
		case r.NotRun > 0 && r.Stopped:
			s += " (stopped at an OOM)"
		case r.NotRun > 0 && r.GivenUp > 0:
			s += " (workers given up)"
		}
		return s
	})
	add("OOMs / alloc retries", func(r Report) string { return fmt.Sprintf("%d / %d", r.OOMs, r.Retries) })
	add("restarts / given up", func(r Report) string { return fmt.Sprintf("%d / %d", r.Restarts, r.GivenUp) })
	add("runs (1 + resumes)", func(r Report) string { return fmt.Sprint(r.Runs) })
	add("simulated time", func(r Report) string { return hours(r.Makespan) })
	add("completed per hour", func(r Report) string { return fmt.Sprintf("%.1f", r.CompletedPerHour) })
	add("peak GPU used", func(r Report) string {
		if r.Capacity == 0 {
			return gib(r.PeakDeviceUsed)
		}
		return fmt.Sprintf("%s (%.0f%%)", gib(r.PeakDeviceUsed), 100*float64(r.PeakDeviceUsed)/float64(r.Capacity))
	})
	add("mean waste (1 - alloc/reserved)", func(r Report) string { return fmt.Sprintf("%.1f%%", 100*r.MeanWaste) })
	add("max reserved-unallocated", func(r Report) string { return gib(r.MaxReservedUnallocated) })
	right := make([]bool, len(header))
	for i := 1; i < len(right); i++ {
		right[i] = true
	}
	if err := renderTable(w, header, rows, right, md); err != nil {
		return err
	}
	for i, r := range reps {
		fmt.Fprintln(w)
		name := "Over the study"
		if len(reps) > 1 {
			name = fmt.Sprintf("(%d) over the study", i+1)
		}
		title(name + " (finished trials in finish order, by tenths)")
		h := []string{"trials", "completed", "pruned OOM", "pruned est.", "failed", "retries", "mean waste", "mean reserved-unalloc", "max reserved-unalloc"}
		var rows [][]string
		for _, b := range r.Buckets {
			rows = append(rows, []string{fmt.Sprintf("%d-%d", b.From, b.To), fmt.Sprint(b.Completed), fmt.Sprint(b.PrunedOOM),
				fmt.Sprint(b.PrunedEstimate), fmt.Sprint(b.Failed), fmt.Sprint(b.Retries),
				fmt.Sprintf("%.1f%%", 100*b.MeanWaste), gib(b.MeanReservedUnallocated), gib(b.MaxReservedUnallocated)})
		}
		rt := make([]bool, len(h))
		for j := 1; j < len(rt); j++ {
			rt[j] = true
		}
		if err := renderTable(w, h, rows, rt, md); err != nil {
			return err
		}
		if r.FirstOOM != "" {
			fmt.Fprintf(w, "%sfirst OOM: %s\n", mdPrefix(md), r.FirstOOM)
		}
		if r.FirstFailure != "" {
			fmt.Fprintf(w, "%sfirst failure: %s\n", mdPrefix(md), r.FirstFailure)
		}
	}
	return nil
}

func mdPrefix(md bool) string {
	if md {
		return "- "
	}
	return ""
}

func count(n, of int) string {
	if of == 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d (%.0f%%)", n, 100*float64(n)/float64(of))
}

func hours(d time.Duration) string {
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1f h", d.Hours())
}

// renderTable draws one table the way profiler/report does: ASCII borders
// (logs and CI read them as often as terminals) or Markdown, with header
// auto-formatting off (it upper-cases labels).
func renderTable(w io.Writer, header []string, rows [][]string, right []bool, md bool) error {
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
	}
	if md {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRendition(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)}))
	}
	align := make(tw.Alignment, len(header))
	for i := range align {
		align[i] = tw.AlignLeft
		if right[i] {
			align[i] = tw.AlignRight
		}
	}
	opts = append(opts, tablewriter.WithAlignment(align), tablewriter.WithHeaderAlignment(tw.AlignLeft))
	t := tablewriter.NewTable(w, opts...)
	esc := func(c []string) []string {
		if !md {
			return c
		}
		out := make([]string, len(c))
		for i, s := range c {
			out[i] = strings.ReplaceAll(s, "|", `\|`)
		}
		return out
	}
	t.Header(esc(header))
	for _, r := range rows {
		if err := t.Append(esc(r)); err != nil {
			return err
		}
	}
	return t.Render()
}

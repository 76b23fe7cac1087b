package par

import (
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/memreplay/memreplay/allocator"
)

// WriteTable prints the report as ASCII tables (terminals, logs, CI).
func WriteTable(w io.Writer, r *Report) error { return write(w, r, false) }

// WriteMarkdown prints the report as Markdown (docs, PR comments).
func WriteMarkdown(w io.Writer, r *Report) error { return write(w, r, true) }

func write(w io.Writer, r *Report, md bool) error {
	p := &printer{w: w, md: md}
	p.title(fmt.Sprintf("memreplay par: %s GPU, %s per context", allocator.FormatSize(r.Capacity), allocator.FormatSize(r.ContextOverhead)))
	stagger := "up to the mean duration of the worker's trials"
	if r.MaxStagger > 0 {
		stagger = "up to " + r.MaxStagger.String()
	}
	p.line(fmt.Sprintf("workload: %s; %d mixes per PAR, %d trials per worker, start offsets %s, seed %d",
		r.Source, r.Mixes, r.TrialsPerWorker, stagger, r.Seed))
	p.line(fmt.Sprintf("model: one trial alone uses %.2g of the GPU's compute (assumed; --trial-share); %d events replayed", r.Share, r.Events))
	conf := pct(r.Confidence)
	for _, res := range r.Results {
		name := res.Setting
		if name == "" {
			name = "(PyTorch defaults)"
		}
		p.heading("alloc-conf " + name)
		header := []string{"PAR", "P(OOM)", "bound " + conf, "OOMs", "too big", "retries", "peak used", "of GPU", "headroom", "waste", "unalloc at OOM", "trials/h", "speedup"}
		var rows [][]string
		all := res.Rows
		if res.Packed != nil {
			all = append(all[:len(all):len(all)], *res.Packed)
		}
		for _, row := range all {
			label := fmt.Sprint(row.PAR)
			if row.PAR == 0 {
				label = "packed"
			}
			rows = append(rows, []string{
				label,
				fmt.Sprintf("%d/%d", row.MixesWithOOM, row.Mixes),
				pct(row.POOMUpper),
				fmt.Sprint(row.OOMs),
				fmt.Sprint(row.TooBig),
				fmt.Sprint(row.Retries),
				allocator.FormatSize(row.PeakUsedMax),
				pct(float64(row.PeakUsedMax) / float64(r.Capacity)),
				allocator.FormatSize(row.HeadroomMin),
				pct(row.Waste),
				unallocAtOOM(row),
				fmt.Sprintf("%.1f", row.TrialsPerHour),
				fmt.Sprintf("%.2fx", row.Speedup),
			})
		}
		if err := p.table(header, rows); err != nil {
			return err
		}
		p.line(verdict(r, &res))
		if pk := res.Packed; pk != nil {
			p.line(packedVerdict(r, &res))
		}
		if len(res.OOMConfigs) > 0 {
			var cs []string
			for _, c := range res.OOMConfigs {
				cs = append(cs, fmt.Sprintf("%s (%d)", c.Label, c.OOMs))
			}
			p.line("ran out of memory beside others, most often (OOMs over all PARs): " + strings.Join(cs, "; "))
		}
		if res.SoloTooBig > 0 {
			p.line(fmt.Sprintf("%d of %d trials drawn do not fit even alone (pruned at any PAR; a pre-trial estimate or model-aware limits would skip them)",
				res.SoloTooBig, res.SoloTrials))
		}
		p.line(fmt.Sprintf("naive estimate floor(0.9 x %s / (peak reserved alone + context)): %d with the median trial (%s), %d with the largest (%s)",
			allocator.FormatSize(r.Capacity), res.NaiveMedian, allocator.FormatSize(res.SoloPeakReservedMedian),
			res.NaiveMax, allocator.FormatSize(res.SoloPeakReservedMax)))
	}
	if len(r.Results) > 1 {
		p.heading("summary")
		var rows [][]string
		for _, res := range r.Results {
			name := res.Setting
			if name == "" {
				name = "(PyTorch defaults)"
			}
			tph := "-"
			if res.BestPAR > 0 {
				tph = fmt.Sprintf("%.1f", res.Rows[res.BestPAR-1].TrialsPerHour)
			}
			rows = append(rows, []string{name, fmt.Sprint(res.SafePAR), fmt.Sprint(res.NoOOMPAR), fmt.Sprint(res.BestPAR), tph,
				fmt.Sprintf("%d / %d", res.NaiveMedian, res.NaiveMax)})
		}
		if err := p.table([]string{"alloc-conf", "safe PAR " + conf, "no OOM seen up to", "best safe PAR", "trials/h there", "naive (median / largest)"}, rows); err != nil {
			return err
		}
	}
	p.line(fmt.Sprintf("P(OOM): mixes in which a trial that fits alone ran out of memory, or a context could not start; bound: one-sided Wilson upper bound at %s confidence. "+
		"OOMs: all OutOfMemoryErrors; too big: pruned trials that do not fit even alone. "+
		"Safe PAR: the largest PAR whose bound, and every smaller PAR's, is below %s (needs at least %d mixes). "+
		"Peak used: the GPU's peak over the mixes, contexts included. Waste: 1 - peak live / peak reserved. "+
		"Unalloc at OOM: the largest 'reserved by PyTorch but unallocated' of an OOM message (the cache's unused bytes when a trial ran out of memory). "+
		"Trials/h: completed trials, steady state "+
		"(packed: while trials were waiting to start).",
		conf, pct(1-r.Confidence), r.MixesNeeded))
	return p.err
}

// packedVerdict compares the packed row with the best safe fixed PAR.
func packedVerdict(r *Report, res *Result) string {
	pk := res.Packed
	s := fmt.Sprintf("packed (each mix's %d trials admitted by their peak reserved alone, at most %d at once): %d/%d mixes with an OOM, %.1f trials/h",
		r.MaxPAR*r.TrialsPerWorker, r.MaxPAR, pk.MixesWithOOM, pk.Mixes, pk.TrialsPerHour)
	if res.BestPAR > 0 {
		best := res.Rows[res.BestPAR-1].TrialsPerHour
		if best > 0 {
			s += fmt.Sprintf(", %.2fx the best safe fixed PAR (%d)", pk.TrialsPerHour/best, res.BestPAR)
		}
	}
	return s
}

// verdict says what the rows mean for this setting, in one line.
func verdict(r *Report, res *Result) string {
	conf := pct(r.Confidence)
	switch {
	case res.SafePAR == 0 && r.Mixes < r.MixesNeeded:
		return fmt.Sprintf("safe PAR at %s confidence: none can be shown with %d mixes (need %d); no OOM seen up to PAR %d",
			conf, r.Mixes, r.MixesNeeded, res.NoOOMPAR)
	case res.SafePAR == 0:
		return fmt.Sprintf("safe PAR at %s confidence: none; even one worker runs out of memory too often (its cache, carried from trial to trial, fragments)", conf)
	}
	s := fmt.Sprintf("safe PAR at %s confidence: %d (no OOM seen up to PAR %d); highest throughput among safe PARs at PAR %d: %.2fx PAR 1",
		conf, res.SafePAR, res.NoOOMPAR, res.BestPAR, res.Rows[res.BestPAR-1].Speedup)
	if res.SafePAR == r.MaxPAR {
		s += fmt.Sprintf(" (the largest PAR tried: search further with --max-par)")
	}
	return s
}

func unallocAtOOM(row Row) string {
	if row.PrunedOOM == 0 {
		return "-"
	}
	return allocator.FormatSize(row.UnallocatedAtOOMMax)
}

func pct(f float64) string {
	s := fmt.Sprintf("%.1f", 100*f)
	return strings.TrimSuffix(s, ".0") + "%"
}

// printer writes titles, lines and tables, keeping the first error.
type printer struct {
	w   io.Writer
	md  bool
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) title(s string) {
	if p.md {
		p.printf("## %s\n\n", s)
	} else {
		p.printf("%s\n", s)
	}
}

func (p *printer) heading(s string) {
	if p.md {
		p.printf("\n### %s\n\n", s)
	} else {
		p.printf("\n%s\n", s)
	}
}

func (p *printer) line(s string) {
	if p.md {
		p.printf("%s\n\n", s)
	} else {
		p.printf("%s\n", s)
	}
}

func (p *printer) table(header []string, rows [][]string) error {
	if p.err != nil {
		return p.err
	}
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
	}
	if p.md {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRendition(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)}))
	}
	align := make(tw.Alignment, len(header))
	for i := range align {
		align[i] = tw.AlignRight
	}
	align[0] = tw.AlignLeft
	opts = append(opts, tablewriter.WithAlignment(align))
	t := tablewriter.NewTable(p.w, opts...)
	t.Header(header)
	for _, r := range rows {
		if p.md {
			for i := range r {
				r[i] = strings.ReplaceAll(r[i], "|", `\|`)
			}
		}
		if err := t.Append(r); err != nil {
			p.err = err
			return err
		}
	}
	p.err = t.Render()
	if p.md && p.err == nil {
		p.printf("\n")
	}
	return p.err
}

package study

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteLimits prints the grid of peaks, one table per model (batch down,
// sequence length across; "-" where the trial does not fit alone), and the
// limits for the target PAR, as ASCII or Markdown.
func WriteLimits(w io.Writer, l *Limits, md bool) error {
	title := func(s string) {
		if md {
			fmt.Fprintf(w, "\n### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "\n%s\n", s)
		}
	}
	var models []string
	for _, c := range l.Grid {
		if !slices.Contains(models, c.Model) {
			models = append(models, c.Model)
		}
	}
	for _, m := range models {
		var bs, ss []int
		peak := map[[2]int]ConfigPeak{}
		for _, c := range l.Grid {
			if c.Model != m {
				continue
			}
			if !slices.Contains(bs, c.Batch) {
				bs = append(bs, c.Batch)
			}
			if !slices.Contains(ss, c.SeqLen) {
				ss = append(ss, c.SeqLen)
			}
			peak[[2]int{c.Batch, c.SeqLen}] = c
		}
		ga := peak[[2]int{bs[0], ss[0]}].GradAccum
		title(fmt.Sprintf("%s: peak reserved alone (GiB), batch x sequence length, grad-accum %d", m, ga))
		header := []string{"batch"}
		right := []bool{true}
		for _, s := range ss {
			header = append(header, fmt.Sprint(s))
			right = append(right, true)
		}
		var rows [][]string
		for _, b := range bs {
			row := []string{fmt.Sprint(b)}
			for _, s := range ss {
				c := peak[[2]int{b, s}]
				cell := "-"
				if c.Fits {
					cell = fmt.Sprintf("%.1f", float64(c.PeakReserved)/(1<<30))
				}
				row = append(row, cell)
			}
			rows = append(rows, row)
		}
		if err := renderTable(w, header, rows, right, md); err != nil {
			return err
		}
	}
	title(fmt.Sprintf("Model-aware limits for PAR %d: %d trials of the largest allowed configuration, each with its context, fit at their peaks at once (%s per trial)",
		l.PAR, l.PAR, gib(l.PerTrial)))
	var rows [][]string
	for _, m := range l.Models {
		if !m.Allowed {
			rows = append(rows, []string{m.Model, "none fits", "", "", ""})
			continue
		}
		var ga []string
		for _, g := range m.GradAccum {
			ga = append(ga, fmt.Sprint(g))
		}
		rows = append(rows, []string{m.Model, fmt.Sprint(m.MaxBatch), fmt.Sprint(m.MaxSeqLen), strings.Join(ga, " "), gib(m.PeakReserved)})
	}
	return renderTable(w, []string{"model", "max batch", "max seq len", "grad accum", "peak reserved there"}, rows,
		[]bool{false, true, true, false, true}, md)
}

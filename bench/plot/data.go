package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// A row is one point of bench/growth.sh's CSV.
type row struct {
	command  string
	n        float64 // events (mixes for par)
	secs     float64
	cpuSecs  float64 // user + system
	rssKiB   float64
	bytes    float64 // the trace, pickle or page; 0: none
	renderMS float64 // the page's drawing time; 0: not measured
	load     float64
}

func (r row) seconds() float64 { return r.secs }
func (r row) cpu() float64     { return r.cpuSecs }
func (r row) rssMiB() float64  { return r.rssKiB / 1024 }

var header = []string{"command", "events", "seconds", "cpu_seconds", "rss_kib", "bytes", "render_ms", "load1"}

func readCSV(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = len(header)
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(recs) == 0 || !slices.Equal(recs[0], header) {
		return nil, fmt.Errorf("%s:1: want the header %v", path, header)
	}
	var rows []row
	for i, rec := range recs[1:] {
		r := row{command: rec[0]}
		for j, dst := range []*float64{&r.n, &r.secs, &r.cpuSecs, &r.rssKiB, &r.bytes, &r.renderMS, &r.load} {
			s := rec[j+1]
			if s == "" {
				continue
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v < 0 || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%s:%d: %s %q is not a number >= 0", path, i+2, header[j+1], s)
			}
			*dst = v
		}
		if r.n <= 0 {
			return nil, fmt.Errorf("%s:%d: events must be positive", path, i+2)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// A series is one command's line, by increasing x.
type series struct {
	name string
	x, y []float64
}

func seriesOf(rows []row, command string, y func(row) float64) series {
	s := series{name: command}
	for _, r := range rows {
		if r.command == command && y(r) > 0 {
			s.x = append(s.x, r.n)
			s.y = append(s.y, y(r))
		}
	}
	return s
}

// slope is the least-squares slope of log y on log x: 1 when y grows as
// x, 0 when flat. NaN with fewer than two distinct x.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		lx, ly := math.Log10(x[i]), math.Log10(y[i])
		sx += lx
		sy += ly
		sxx += lx * lx
		sxy += lx * ly
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// upper is the series' last k points: where the work, not the process's
// start, sets the cost.
func (s series) upper(k int) series {
	if len(s.x) <= k {
		return s
	}
	return series{name: s.name, x: s.x[len(s.x)-k:], y: s.y[len(s.y)-k:]}
}

// writeTable prints the figures and slopes as Markdown.
func writeTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| command | events (par: mixes) | wall time | CPU time | peak RSS | file or page | page drawn in | load |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		b, ms := "", ""
		if r.bytes > 0 {
			b = fmt.Sprintf("%.1f MB", r.bytes/1e6)
		}
		if r.renderMS > 0 {
			ms = fmt.Sprintf("%.0f ms", r.renderMS)
		}
		fmt.Fprintf(w, "| %s | %s | %.2f s | %.2f s | %.0f MiB | %s | %s | %.1f |\n", r.command, count(r.n), r.secs, r.cpuSecs, r.rssKiB/1024, b, ms, r.load)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| command | wall time slope (all; last 3 points) | CPU time slope (all; last 3) | RSS slope (all; last 3) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, c := range []string{"replay", "import", "report", "par"} {
		if len(seriesOf(rows, c, row.seconds).x) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s", c)
		for _, y := range []func(row) float64{row.seconds, row.cpu, row.rssMiB} {
			s := seriesOf(rows, c, y)
			fmt.Fprintf(w, " | %.2f; %.2f", slope(s.x, s.y), slope(s.upper(3).x, s.upper(3).y))
		}
		fmt.Fprintln(w, " |")
	}
}

func count(n float64) string {
	s := strconv.FormatFloat(n, 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Command plot draws bench/growth.sh's figures: it reads the CSV the
// script wrote (command, events or mixes, wall and CPU seconds, peak RSS in
// KiB, ...),
// fits each command's line on log-log axes and writes the plots as
// hand-written SVG (no plotting library: a few axes and polylines are less
// code than a dependency's options), then prints the table of figures and
// slopes for docs/performance.md.
//
// Usage:
//
//	plot -csv docs/data/growth.csv -img docs/img
//	plot render PAGE.html [zoom=A,B]
//
// render prints the page's drawing time in ms and the points its first
// timeline draws (with a fragment such as zoom=A,B: zoomed to events A..B).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "render" {
		if len(os.Args) != 3 && len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: plot render PAGE.html [FRAGMENT]")
			os.Exit(2)
		}
		if err := render(os.Stdout, os.Args[2], os.Args[3:]...); err != nil {
			fmt.Fprintln(os.Stderr, "plot render:", err)
			os.Exit(1)
		}
		return
	}
	csvPath := flag.String("csv", "docs/data/growth.csv", "bench/growth.sh's CSV")
	imgDir := flag.String("img", "docs/img", "where the SVG plots go")
	flag.Parse()
	rows, err := readCSV(*csvPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(2)
	}
	if err := os.MkdirAll(*imgDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
	trace := []string{"replay", "import", "report"}
	figs := []struct {
		file   string
		cmds   []string
		xLabel string
		yLabel string
		y      func(row) float64
	}{
		{"growth-time.svg", trace, "trace length (events)", "wall time (s)", row.seconds},
		{"growth-cpu.svg", trace, "trace length (events)", "CPU time, user + system (s)", row.cpu},
		{"growth-rss.svg", trace, "trace length (events)", "peak RSS (MiB)", row.rssMiB},
		{"growth-par-time.svg", []string{"par"}, "mixes per PAR and setting", "wall time (s)", row.seconds},
		{"growth-par-cpu.svg", []string{"par"}, "mixes per PAR and setting", "CPU time, user + system (s)", row.cpu},
		{"growth-par-rss.svg", []string{"par"}, "mixes per PAR and setting", "peak RSS (MiB)", row.rssMiB},
	}
	for _, f := range figs {
		var ss []series
		for _, c := range f.cmds {
			if s := seriesOf(rows, c, f.y); len(s.x) > 0 {
				ss = append(ss, s)
			}
		}
		if len(ss) == 0 {
			continue
		}
		path := filepath.Join(*imgDir, f.file)
		if err := os.WriteFile(path, svgPlot(ss, f.xLabel, f.yLabel), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "plot:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "wrote", path)
	}
	writeTable(os.Stdout, rows)
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/memreplay/memreplay/profiler/report"
)

// render loads an HTML report in headless Chromium and prints the
// script's own drawing time (its self-check's render_ms) and the points of
// the first timeline, summed over its series.
func render(w io.Writer, page string, fragment ...string) error {
	browser, err := report.FindChromium()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dom, err := report.RenderHTML(ctx, browser, page, report.RenderOptions{Fragment: strings.Join(fragment, "")})
	if err != nil {
		return err
	}
	sc, err := report.ParseSelfCheck(dom)
	if err != nil {
		return err
	}
	if len(sc.Errors) > 0 {
		return fmt.Errorf("%s: the page logged errors: %v", page, sc.Errors)
	}
	points := 0
	if c := sc.Chart("timeline-0"); c != nil {
		for _, s := range c.Series {
			points += s.Points
		}
	}
	_, err = fmt.Fprintf(w, "%.0f %d\n", sc.RenderMS, points)
	return err
}

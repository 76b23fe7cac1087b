package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// The plot's geometry, in SVG user units.
const (
	width, height            = 640, 400
	left, right, top, bottom = 70, 170, 20, 50
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}

// svgPlot draws the series on log-log axes: whole decades spanning every
// point, a grid line per decade, a polyline and dots per series, and a
// legend with each line's fitted slope.
func svgPlot(ss []series, xLabel, yLabel string) []byte {
	x0, x1 := decades(ss, func(s series) []float64 { return s.x })
	y0, y1 := decades(ss, func(s series) []float64 { return s.y })
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	px := func(v float64) float64 { return left + (math.Log10(v)-x0)/(x1-x0)*pw }
	py := func(v float64) float64 { return top + ph - (math.Log10(v)-y0)/(y1-y0)*ph }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for e := x0; e <= x1; e++ {
		x := px(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, top, x, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+18, power(e))
	}
	for e := y0; e <= y1; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+pw, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, power(e))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+pw/2, height-8, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, html.EscapeString(yLabel))
	for i, s := range ss {
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline data-series="%s" fill="none" stroke="%s" stroke-width="2" points="`, html.EscapeString(s.name), c)
		for j := range s.x {
			fmt.Fprintf(&b, "%.1f,%.1f ", px(s.x[j]), py(s.y[j]))
		}
		b.WriteString("\"/>\n")
		for j := range s.x {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s, %.3g</title></circle>`+"\n",
				px(s.x[j]), py(s.y[j]), c, html.EscapeString(s.name), count(s.x[j]), s.y[j])
		}
		ly := float64(top + 16 + 36*i)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="%s" stroke-width="2"/>`+"\n", width-right+12, ly, width-right+32, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" dominant-baseline="middle">%s</text>`+"\n", width-right+38, ly, html.EscapeString(s.name))
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" dominant-baseline="middle" fill="#555">slope %.2f (last 3: %.2f)</text>`+"\n",
			width-right+12, ly+16, slope(s.x, s.y), slope(s.upper(3).x, s.upper(3).y))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// decades returns the whole powers of ten around every value of the
// series (log10), at least one decade apart.
func decades(ss []series, vals func(series) []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range vals(s) {
			lo, hi = math.Min(lo, math.Log10(v)), math.Max(hi, math.Log10(v))
		}
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// power writes 10^e as 10 with a superscript, plainly for small ones.
func power(e float64) string {
	switch e {
	case 0:
		return "1"
	case 1:
		return "10"
	case 2:
		return "100"
	case -1:
		return "0.1"
	case -2:
		return "0.01"
	}
	return fmt.Sprintf(`10<tspan dy="-6" font-size="9">%d</tspan>`, int(e))
}

package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSlope(t *testing.T) {
	x := []float64{1e3, 1e4, 1e5, 1e6}
	for _, c := range []struct {
		y    func(float64) float64
		want float64
	}{
		{func(x float64) float64 { return 3 * x }, 1},
		{func(x float64) float64 { return 0.5 * x * x }, 2},
		{func(x float64) float64 { return 7 }, 0},
		{func(x float64) float64 { return 1 / math.Sqrt(x) }, -0.5},
	} {
		y := make([]float64, len(x))
		for i := range x {
			y[i] = c.y(x[i])
		}
		if got := slope(x, y); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("slope = %v, want %v", got, c.want)
		}
	}
	if !math.IsNaN(slope([]float64{10}, []float64{1})) {
		t.Error("one point has no slope")
	}
	s := series{x: []float64{1, 10, 100, 1000}, y: []float64{5, 5, 50, 500}}
	if got := slope(s.upper(3).x, s.upper(3).y); math.Abs(got-1) > 1e-9 {
		t.Errorf("upper slope = %v, want 1 (the flat start left out)", got)
	}
}

func TestReadCSVNamesTheBadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.csv")
	good := strings.Join(header, ",") + "\nreplay,1000,0.01,0.02,9000,,,3.5\n"
	if err := os.WriteFile(p, []byte(good+"import,2000,x,0.1,9000,,,3.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCSV(p); err == nil || !strings.Contains(err.Error(), "g.csv:3: seconds") {
		t.Fatalf("err = %v, want the file, line 3 and the column", err)
	}
	if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readCSV(p)
	if err != nil || len(rows) != 1 || rows[0].rssMiB() != 9000.0/1024 || rows[0].cpu() != 0.02 || rows[0].bytes != 0 {
		t.Fatalf("rows = %+v, %v", rows, err)
	}
}

// TestSVGPlot: the plot is well-formed SVG with one polyline per series,
// a vertex per point, every vertex inside the plotting area, and larger
// values drawn higher and further right.
func TestSVGPlot(t *testing.T) {
	ss := []series{
		{name: "replay", x: []float64{1e3, 1e4, 1e5}, y: []float64{0.01, 0.02, 0.2}},
		{name: "import", x: []float64{1e3, 1e4}, y: []float64{0.03, 0.3}},
	}
	out := svgPlot(ss, "events", "s")
	var doc struct {
		Lines []struct {
			Series string `xml:"data-series,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	if len(doc.Lines) != 2 || doc.Lines[0].Series != "replay" || doc.Lines[1].Series != "import" {
		t.Fatalf("lines = %+v", doc.Lines)
	}
	for i, l := range doc.Lines {
		pts := strings.Fields(l.Points)
		if len(pts) != len(ss[i].x) {
			t.Fatalf("%s: %d vertices, want %d", l.Series, len(pts), len(ss[i].x))
		}
		var prevX, prevY float64
		for j, p := range pts {
			var x, y float64
			if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil {
				t.Fatal(err)
			}
			if x < left || x > width-right || y < top || y > height-bottom {
				t.Errorf("%s: vertex %v,%v outside the plot", l.Series, x, y)
			}
			if j > 0 && (x <= prevX || y >= prevY) {
				t.Errorf("%s: vertex %d (%v,%v) not right of and above (%v,%v)", l.Series, j, x, y, prevX, prevY)
			}
			prevX, prevY = x, y
		}
	}
	if !strings.Contains(string(out), "slope 1.00") {
		t.Error("the legend states import's slope of 1.00")
	}
}

package report_test

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
)

// pageData returns the JSON document embedded in a page.
func pageData(t *testing.T, page string) map[string]any {
	t.Helper()
	m := regexp.MustCompile(`(?s)<script type="application/json" id="memreplay-data">(.*?)</script>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no data element")
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(m[1]), &v))
	return v
}

func writePage(t *testing.T, r *report.HTMLReport) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, report.WriteHTML(&buf, r))
	return buf.String()
}

func expandable(t *testing.T) *config.Config {
	c, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	return &c
}

// TestHTMLSelfContained: the page fetches nothing. The only URL it holds
// is the SVG namespace name, which is never fetched.
func TestHTMLSelfContained(t *testing.T) {
	tr := recordTrainingLike(t)
	page := writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: replayed(t, tr, nil, false)}}})
	for _, bad := range []string{"<link", "@import", " src=", "fetch(", "XMLHttpRequest", "<iframe"} {
		assert.NotContains(t, page, bad)
	}
	// The data may quote URLs (PyTorch's OOM message names its docs) as
	// text; the page's own code and markup name none.
	code := regexp.MustCompile(`(?s)<script type="application/json" id="memreplay-data">.*?</script>`).ReplaceAllString(page, "")
	code = strings.ReplaceAll(code, "http://www.w3.org/2000/svg", "")
	assert.NotRegexp(t, `(?i)(https?:|ftp:)//`, code)
	// One script element of code and one of data: the data cannot end it
	// early (json escapes '<').
	assert.Equal(t, 2, strings.Count(page, "</script>"))
	assert.Equal(t, 1, strings.Count(page, "<script>"))
}

// TestHTMLSameNumbersAsJSON: the figures the page shows are the JSON
// report's, key for key, and its timeline is the JSON's timeline.
func TestHTMLSameNumbersAsJSON(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, false)
	var js bytes.Buffer
	require.NoError(t, report.WriteJSON(&js, in))
	var want map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &want))

	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}))
	runs := d["runs"].([]any)
	require.Len(t, runs, 1)
	run := runs[0].(map[string]any)
	got := run["report"].(map[string]any)

	wantTimeline := want["timeline"].([]any)
	delete(want, "timeline")
	assert.Nil(t, got["timeline"], "the page keeps the timeline as columns")
	delete(got, "timeline")
	assert.Equal(t, want, got)
	for _, k := range []string{"fragmentation", "stats", "device_calls", "ooms", "retries", "top_sites"} {
		assert.Contains(t, got, k)
	}
	require.NotEmpty(t, got["retries"], "the OOM came after a retry")

	cols := run["timeline"].(map[string]any)
	require.NotEmpty(t, wantTimeline)
	for col, key := range map[string]string{"event": "event", "live": "live_bytes", "max_live": "max_live_bytes",
		"requested": "requested_bytes", "reserved": "reserved_bytes", "max_reserved": "max_reserved_bytes",
		"free": "free_bytes", "largest_free": "largest_free_block_bytes"} {
		c := cols[col].([]any)
		require.Len(t, c, len(wantTimeline), col)
		for i, s := range wantTimeline {
			assert.Equal(t, s.(map[string]any)[key], c[i], "%s[%d]", col, i)
		}
	}
}

// TestHTMLCaptures: the page carries the segment map at the peak and at
// the OOM, and the maps add up to the capture's figures.
func TestHTMLCaptures(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, false)
	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Input: in}}}))
	run := d["runs"].([]any)[0].(map[string]any)
	assert.Equal(t, "defaults (trace)", run["label"], "a run without a label is named by its settings")
	caps := run["captures"].([]any)
	require.Len(t, caps, 2)
	kinds := []string{caps[0].(map[string]any)["kind"].(string), caps[1].(map[string]any)["kind"].(string)}
	assert.Equal(t, []string{"peak", "oom"}, kinds)
	sites := run["sites"].(map[string]any)
	for _, c := range caps {
		cm := c.(map[string]any)
		var reserved, live, free float64
		for _, s := range cm["segments"].([]any) {
			sm := s.(map[string]any)
			size := sm["size"].(float64)
			reserved += size
			used := 0.0
			for _, b := range sm["blocks"].([]any) {
				bm := b.(map[string]any)
				used += bm["size"].(float64)
				if bm["allocated"].(bool) {
					live += bm["size"].(float64)
					assert.Contains(t, sites, jsonKey(bm["stack"]), "every block's site is on the page")
				}
			}
			free += size - used
		}
		assert.Equal(t, cm["reserved_bytes"], reserved, cm["title"])
		assert.Equal(t, cm["live_bytes"], live, cm["title"])
		assert.Equal(t, cm["free_bytes"], free, cm["title"])
	}
	assert.Equal(t, in.Profile.Peak.StrandedBytes, uint64(caps[0].(map[string]any)["stranded_bytes"].(float64)))
}

func jsonKey(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestHTMLBest: with several runs, the page names the one with the fewest
// OOMs and then the lowest peak reserved.
func TestHTMLBest(t *testing.T) {
	tr := recordTrainingLike(t)
	def := replayed(t, tr, nil, false)
	exp := replayed(t, tr, expandable(t), false)
	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: def}, {Label: "expandable", Input: exp}}}))
	fd, fe := def.Profile.Total, exp.Profile.Total
	want := 0
	if fe.OOMs < fd.OOMs || fe.OOMs == fd.OOMs && fe.PeakReservedBytes < fd.PeakReservedBytes {
		want = 1
	}
	assert.Equal(t, float64(want), d["best"])
	t.Logf("recorded: %d OOMs, peak reserved %d; expandable: %d OOMs, peak reserved %d", fd.OOMs, fd.PeakReservedBytes, fe.OOMs, fe.PeakReservedBytes)

	assert.Equal(t, false, d["same_setting"])
	assert.Equal(t, []any{}, d["tied"])

	one := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Input: def}}}))
	assert.Nil(t, one["best"])

	// The recorded settings are PyTorch's defaults: the same setting given
	// again is the same allocator, not a better one.
	dc := config.Default()
	again := replayed(t, tr, &dc, false)
	require.Equal(t, "", again.Result.Config.String())
	same := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: def}, {Label: "defaults", Input: again}}}))
	assert.Nil(t, same["best"])
	assert.Equal(t, true, same["same_setting"])

	// Different settings with the same figures tie: none is named best.
	gc, err := config.Parse("garbage_collection_threshold:0.8")
	require.NoError(t, err)
	tie := replayed(t, tr, &gc, false)
	require.Equal(t, fd.PeakReservedBytes, tie.Profile.Total.PeakReservedBytes, "without a memory fraction the threshold does nothing")
	require.Equal(t, fd.OOMs, tie.Profile.Total.OOMs)
	tied := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: def}, {Label: "gc", Input: tie}}}))
	assert.Nil(t, tied["best"])
	assert.Equal(t, []any{0.0, 1.0}, tied["tied"])
	assert.Equal(t, false, tied["same_setting"])
}

func parSection() *report.PARSection {
	nan := math.NaN()
	return &report.PARSection{
		Title:          "hand-made: BERT-base trials on a 24 GiB GPU",
		Settings:       []string{"defaults", "expandable_segments:True"},
		K:              []int{1, 2, 3, 4},
		POOM:           [][]float64{{0, 0.02, 0.3, 0.9}, {0, 0, 0.05, nan}},
		Throughput:     [][]float64{{10, 19, 22, 8}, {10, 19.5, 27, nan}},
		ThroughputUnit: "trials/h",
		Saturation:     []int{3, 4},
		Notes:          []string{"NaN: not measured"},
	}
}

func TestPARSection(t *testing.T) {
	d := pageData(t, writePage(t, &report.HTMLReport{PAR: parSection()}))
	par := d["par"].(map[string]any)
	assert.Equal(t, []any{[]any{0.0, 0.02, 0.3, 0.9}, []any{0.0, 0.0, 0.05, nil}}, par["p_oom"], "NaN travels as null")
	assert.Equal(t, []any{1.0, 2.0, 3.0, 4.0}, par["k"])

	bad := []func(p *report.PARSection){
		func(p *report.PARSection) { p.K = nil },
		func(p *report.PARSection) { p.POOM = p.POOM[:1] },
		func(p *report.PARSection) { p.Throughput[1] = p.Throughput[1][:3] },
		func(p *report.PARSection) { p.POOM[0][1] = 1.5 },
		func(p *report.PARSection) { p.Throughput[0][0] = -1 },
		func(p *report.PARSection) { p.Throughput[0][0] = math.Inf(1) },
		func(p *report.PARSection) { p.Saturation = []int{1} },
	}
	for i, mut := range bad {
		p := parSection()
		mut(p)
		err := report.WriteHTML(&bytes.Buffer{}, &report.HTMLReport{PAR: p})
		assert.Error(t, err, "case %d", i)
	}
	assert.Error(t, report.WriteHTML(&bytes.Buffer{}, &report.HTMLReport{}), "nothing to draw")
}

// TestAssetsCannotBreakThePage: the inlined code holds no end tag that
// would close its element early.
func TestAssetsCannotBreakThePage(t *testing.T) {
	page := writePage(t, &report.HTMLReport{PAR: parSection()})
	start := strings.Index(page, "<script>\n")
	require.GreaterOrEqual(t, start, 0)
	code := page[start+len("<script>\n"):]
	end := strings.Index(code, "</script>")
	require.GreaterOrEqual(t, end, 0)
	assert.Contains(t, code[:end], "selfCheck()", "the whole script is inside its element")
	assert.NotContains(t, page[strings.Index(page, "<style>"):strings.Index(page, "</style>")], "</")
}

// BenchmarkWriteHTML writes the page of a long trace (20,000 timeline
// samples); figures in docs/report.md.
func BenchmarkWriteHTML(b *testing.B) {
	r := &report.HTMLReport{Runs: []report.HTMLRun{{Label: "long", Input: &report.Input{Profile: longProfile()}}}}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := report.WriteHTML(&buf, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "page-bytes")
}

// TestHTMLSeveralTraces: runs of different traces are not ranked against
// each other.
func TestHTMLSeveralTraces(t *testing.T) {
	tr := recordTrainingLike(t)
	a := replayed(t, tr, nil, false)
	b := replayed(t, tr, nil, false)
	b.Trace.SourceFile = "other.mrt"
	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "a", Input: a}, {Label: "b", Input: b}}}))
	assert.Nil(t, d["best"])
	assert.Equal(t, false, d["same_trace"])
}

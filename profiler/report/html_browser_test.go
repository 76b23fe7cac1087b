package report_test

import (
	"context"
	"errors"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// The browser test: the page is loaded in headless Chromium, as a user's
// browser would load it, and the self-check its script writes after
// drawing (html.go) is read back from the DOM. Without Chromium the test
// skips and says how to get it (.ci/run installs Debian's chromium when it
// can).

func browser(t *testing.T) string {
	t.Helper()
	b, err := report.FindChromium()
	if err != nil {
		t.Skipf("browser test skipped: %v; on Debian: apt-get install -y chromium", err)
	}
	return b
}

// skipIfBrowserCrashed skips when Chromium died of a signal on every
// attempt (RenderHTML retries): the browser, not the page, failed, and the
// skip summary of `make test` says so.
func skipIfBrowserCrashed(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, report.ErrBrowserCrashed) {
		t.Skipf("browser test skipped: Chromium kept crashing on start-up on this machine: %v", err)
	}
}

// artifacts is where screenshots go: $MEMREPLAY_ARTIFACTS when set (CI
// keeps it), else the test's temporary directory.
func artifacts(t *testing.T) string {
	if d := os.Getenv("MEMREPLAY_ARTIFACTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// render writes the page, loads it and returns the self-check and the DOM.
func render(t *testing.T, r *report.HTMLReport, name, fragment string) (*report.SelfCheck, string) {
	t.Helper()
	b := browser(t)
	dir := t.TempDir()
	path := filepath.Join(dir, name+".html")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, report.WriteHTML(f, r))
	require.NoError(t, f.Close())
	shot := filepath.Join(artifacts(t), name+".png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dom, err := report.RenderHTML(ctx, b, path, report.RenderOptions{Fragment: fragment, Screenshot: shot})
	skipIfBrowserCrashed(t, err)
	require.NoError(t, err)
	st, err := os.Stat(shot)
	require.NoError(t, err, "screenshot")
	assert.Greater(t, st.Size(), int64(10000), "screenshot %s", shot)
	t.Logf("screenshot: %s", shot)
	sc, err := report.ParseSelfCheck(dom)
	require.NoError(t, err)
	require.True(t, sc.Rendered)
	require.Empty(t, sc.Errors, "script errors")
	t.Logf("%s: %d bytes, drawn in %.0f ms", name, fileSize(t, path), sc.RenderMS)
	return sc, dom
}

func seriesPoints(t *testing.T, c *report.ChartCheck) map[string]int {
	t.Helper()
	require.NotNil(t, c)
	out := map[string]int{}
	for _, s := range c.Series {
		out[s.Name] = s.Points
	}
	return out
}

// TestBrowserReport: two settings of the training-like trace and a PAR
// section: every chart holds the series and points its data has, OOMs and
// retries are marked, and the figures print as format_size does.
func TestBrowserReport(t *testing.T) {
	tr := recordTrainingLike(t)
	def := replayed(t, tr, nil, false)
	exp := replayed(t, tr, expandable(t), false)
	runs := []report.HTMLRun{{Label: "recorded settings", Input: def}, {Label: "expandable_segments:True", Input: exp}}
	sc, dom := render(t, &report.HTMLReport{Runs: runs, PAR: parSection()}, "report", "")
	figs, err := report.ExtractFigures(dom)
	require.NoError(t, err)

	var names []string
	for _, c := range sc.Charts {
		names = append(names, c.Chart)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"compare", "par-poom", "par-throughput", "segments-0", "segments-1", "timeline-0", "timeline-1"}, names)

	// Bars: one series per setting, one bar per figure.
	assert.Equal(t, map[string]int{"recorded settings": 4, "expandable_segments:True": 4}, seriesPoints(t, sc.Chart("compare")))

	for i, run := range runs {
		c := sc.Chart("timeline-" + string(rune('0'+i)))
		n := len(run.Input.Profile.Timeline)
		require.Greater(t, n, 10)
		// A short trace: every sample is drawn.
		assert.Equal(t, map[string]int{"reserved": n, "live (allocated)": n, "requested": n}, seriesPoints(t, c), run.Label)
		marks := len(run.Input.Result.OOMs) + len(run.Input.Profile.Retries)
		assert.Equal(t, marks, c.Markers, "%s: OOMs and retries marked", run.Label)
		assert.Positive(t, len(run.Input.Profile.Retries), run.Label)
		// Requested bytes are live bytes before rounding and the lines
		// often coincide: live is drawn last, thin, over a wide requested
		// band, so that both show.
		var order []string
		for _, s := range c.Series {
			order = append(order, s.Name)
		}
		assert.Equal(t, []string{"reserved", "requested", "live (allocated)"}, order, run.Label)
		assert.Regexp(t, `data-series="requested"[^>]*stroke-width="6"[^>]*stroke-opacity="0.35"`, string(figs["timeline-"+string(rune('0'+i))]))
		assert.Regexp(t, `data-series="live \(allocated\)"[^>]*stroke-width="1.6"`, string(figs["timeline-"+string(rune('0'+i))]))

		// The segment map at the peak: one rectangle per block (more when
		// a block wraps to the next row), one per free gap.
		peak := run.Input.Profile.Peak
		var blocks, gaps int
		for _, s := range peak.Layout {
			at := uint64(0)
			for _, b := range s.Blocks {
				if b.Offset > at {
					gaps++
				}
				at = b.Offset + b.Size
				blocks++
			}
			if at < s.Size {
				gaps++
			}
		}
		sp := seriesPoints(t, sc.Chart("segments-"+string(rune('0'+i))))
		assert.GreaterOrEqual(t, sp["blocks"], blocks)
		assert.LessOrEqual(t, sp["blocks"], blocks+32, "at most one extra rectangle per row")
		assert.GreaterOrEqual(t, sp["free"], gaps)
		assert.LessOrEqual(t, sp["free"], gaps+32)

		// The figures table prints the JSON's number as format_size does.
		want := allocator.FormatSize(run.Input.Profile.Total.PeakLiveBytes)
		assert.Contains(t, dom, `data-figure="peak live">`+want, run.Label)
	}

	// PAR: one line per setting, one point per measured K.
	assert.Equal(t, map[string]int{"defaults": 4, "expandable_segments:True": 3}, seriesPoints(t, sc.Chart("par-poom")))
	assert.Equal(t, map[string]int{"defaults": 4, "expandable_segments:True": 3}, seriesPoints(t, sc.Chart("par-throughput")))
	assert.Contains(t, dom, "PAR 3")
}

// longProfile is a hand-made profile of a long trace: 20,000 samples of
// 10 events each, a sawtooth of live bytes under a stepping reservation.
func longProfile() *profiler.Profile {
	const n = 20000
	p := &profiler.Profile{Events: 10 * n, SampleEvery: 10}
	for i := 0; i < n; i++ {
		live := uint64(1<<30 + (i%977)*(1<<20))
		res := uint64(3<<30 + (i/5000)*(256<<20))
		p.Timeline = append(p.Timeline, profiler.Sample{Event: int64(10*i + 9), TimeUS: int64(1_700_000_000_000_000 + 1000*i),
			LiveBytes: live, MaxLiveBytes: live + 1<<20, RequestedBytes: live - 4096, ReservedBytes: res, MaxReservedBytes: res})
	}
	p.Total.PeakLiveBytes, p.Total.PeakLiveEvent = 1<<30+976<<20+1<<20, 9769
	return p
}

// TestBrowserLargeTimeline: a long timeline is drawn with at most two
// points per pixel column, and zooming in redraws the range from every
// sample in it.
func TestBrowserLargeTimeline(t *testing.T) {
	in := &report.Input{Profile: longProfile()}
	r := &report.HTMLReport{Runs: []report.HTMLRun{{Label: "long", Input: in}}}
	sc, dom := render(t, r, "long", "")
	assert.Contains(t, pageText(dom), "time on the x axis \u00b7 drag across a chart to zoom", "the controls read apart")
	pts := seriesPoints(t, sc.Chart("timeline-0"))
	for name, n := range pts {
		assert.LessOrEqual(t, n, 2*1100, name)
		assert.Greater(t, n, 500, name)
	}

	// Zoomed to events 1000..1999: the samples in the range, and one on
	// either side so that the lines reach the edges.
	sc, dom = render(t, r, "long-zoomed", "zoom=1000,1999")
	events := make([]float64, len(in.Profile.Timeline))
	for i, s := range in.Profile.Timeline {
		events[i] = float64(s.Event)
	}
	lb := func(v float64) int { return sort.SearchFloat64s(events, v) }
	want := min(len(events), lb(1999)+1) - max(0, lb(1000)-1)
	assert.Equal(t, map[string]int{"reserved": want, "live (allocated)": want, "requested": want}, seriesPoints(t, sc.Chart("timeline-0")))
	assert.True(t, strings.Contains(dom, "showing events 1000 to 1999"))
}

// pageText is the text of the report in a dumped DOM without its tags,
// as a reader (or a screen reader, or a copy and paste) gets it.
func pageText(dom string) string {
	if m := regexp.MustCompile(`(?s)<main id="report">(.*?)</main>`).FindStringSubmatch(dom); m != nil {
		dom = m[1]
	}
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(dom, ""))
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// TestBrowserChecks: --check and --expect-stats show on the page as in the
// table: the verdicts, and each differing statistic with its standard.
func TestBrowserChecks(t *testing.T) {
	tr := recordTrainingLike(t)
	first := replayed(t, tr, nil, true)
	want := first.Result.Devices[0].Stats.Map()
	want["reserved_bytes.all.peak"] += 2 << 20
	want["num_ooms_from_a_newer_pytorch"] = 1
	p := profiler.New(tr.Stacks, profiler.Options{})
	res, err := replay.Run(tr.NewReader(), replay.Options{Name: tr.Header.SourceFile, Recorder: p, Check: true,
		OOM: replay.OOMSkip, ExpectStats: &replay.MemoryStats{File: "run.stats.json", Device: -1, Values: want}})
	require.NoError(t, err)
	in := &report.Input{Trace: tr.Header, Result: res, Profile: p.Finish(), Stacks: tr.Stacks}
	require.True(t, res.Check.Passed())
	require.False(t, res.StatsCheck.Passed())

	_, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}, "checks", "checks")
	c := res.Check
	assert.Regexp(t, `<ul data-check="decisions" class="passed"><li>check PASSED: `+
		strconv.FormatInt(c.DecisionsMatched, 10)+` of `+strconv.FormatInt(c.DecisionsExpected, 10)+` decisions matched</li>`, dom)
	sc := res.StatsCheck
	assert.Contains(t, dom, `<p data-check="stats" class="failed">memory_stats() check FAILED: `+
		strconv.Itoa(sc.ExactMatched)+` of `+strconv.Itoa(sc.Exact)+` exact keys match (run.stats.json, device 0)</p>`)
	peak := first.Result.Devices[0].Stats.ReservedBytes[allocator.StatAll].Peak
	assert.Contains(t, dom, `<td>reserved_bytes.all.peak</td><td class="num">`+strconv.FormatInt(peak+2<<20, 10)+
		`</td><td class="num">`+strconv.FormatInt(peak, 10)+`</td><td>exact</td>`)
	assert.Contains(t, dom, "not compared: 1 key (num_ooms_from_a_newer_pytorch)")
}

// TestBrowserVerdict: the page names no best setting where there is
// nothing to choose: the same setting twice, or settings that tie.
func TestBrowserVerdict(t *testing.T) {
	tr := recordTrainingLike(t)
	def := replayed(t, tr, nil, false)
	dc := config.Default()
	again := replayed(t, tr, &dc, false)
	_, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded settings", Input: def}, {Label: "defaults", Input: again}}}, "same-setting", "")
	text := pageText(dom)
	assert.Contains(t, text, "The runs replay one and the same setting (defaults): recorded settings and defaults are the same allocator, so there is no best to pick.")
	assert.NotContains(t, text, "Best setting")
	assert.False(t, strings.Contains(dom, `class="num best"`), "no figure marked best")

	gc, err := config.Parse("garbage_collection_threshold:0.8")
	require.NoError(t, err)
	_, dom = render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded settings", Input: def},
		{Label: "garbage_collection_threshold:0.8", Input: replayed(t, tr, &gc, false)}}}, "tied", "")
	text = pageText(dom)
	assert.Contains(t, text, "No single best setting on this trace: recorded settings and garbage_collection_threshold:0.8 tie with the lowest peak reserved ("+
		allocator.FormatSize(def.Profile.Total.PeakReservedBytes)+")")
	assert.NotContains(t, text, "Best setting")
}

// TestBrowserStateOnly: a snapshot of the allocator's state without
// events (torch.cuda.memory._snapshot() without _record_memory_history)
// draws no empty timeline; the page says why and what it shows instead.
func TestBrowserStateOnly(t *testing.T) {
	rec := recordTrainingLike(t)
	tr := &trace.Trace{Header: rec.Header, Stacks: rec.Stacks, Initial: rec.Final, InitialReconstructed: true}
	in := replayed(t, tr, nil, false)
	require.Zero(t, in.Result.Events)
	rc := in.Result.Reconstructed
	require.NotNil(t, rc)
	sc, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "state", Input: in}}}, "state-only", "")
	assert.Nil(t, sc.Chart("timeline-0"), "no empty chart")
	assert.NotNil(t, sc.Chart("segments-0"), "the state's segment map")
	assert.Contains(t, pageText(dom), "No events recorded: the trace holds the allocator's state ("+
		strconv.Itoa(rc.Segments)+" segments, "+allocator.FormatSize(rc.SegmentBytes)+" reserved, "+strconv.Itoa(rc.LiveBlocks)+
		" live blocks of "+allocator.FormatSize(rc.LiveBytes)+"), not its history, so there is nothing to draw over time.")
	assert.False(t, strings.Contains(dom, `id="zoom-reset"`), "nothing to zoom")
}

package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// Rendering the page in headless Chromium: the browser test's check and
// `memreplay report --svg`'s figures both load the page the way a user's
// browser does and read back what its script drew.

// ErrNoChromium is returned by FindChromium when no browser is installed.
var ErrNoChromium = errors.New("no Chromium found (set MEMREPLAY_CHROMIUM, or install Debian's chromium package)")

// FindChromium returns the browser to render with: $MEMREPLAY_CHROMIUM,
// else the first of chromium, chromium-browser, google-chrome on PATH.
func FindChromium() (string, error) {
	if p := os.Getenv("MEMREPLAY_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// BrowserWindow is the viewport the page is rendered in: the charts size
// themselves to it, so figures come out the same on every machine.
const BrowserWindow = "1280,2000"

// chromiumArgs are the flags of a headless run that touches nothing
// outside its own temporary profile and reaches no network.
func chromiumArgs(profileDir string) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--hide-scrollbars", "--mute-audio",
		"--window-size=" + BrowserWindow, "--user-data-dir=" + profileDir}
}

// ErrBrowserCrashed is returned by RenderHTML when the browser died of a
// signal on every attempt. A headless Chromium on a loaded machine now and
// then segfaults at start-up, before it has read the page (its stderr then
// shows only its own start-up complaints); a page cannot make the browser
// process die of a signal, so RenderHTML starts it again, crashAttempts
// times in all, and callers may tell this apart from a page that failed.
var ErrBrowserCrashed = errors.New("the browser crashed")

const crashAttempts = 3

// crashed tells whether err is the browser dying of a signal on its own,
// not killed by ctx (a timeout is the page's or the machine's problem and
// is never retried).
func crashed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// RenderOptions are RenderHTML's options.
type RenderOptions struct {
	// Fragment is appended to the page's URL after "#" (e.g. "zoom=0,100").
	Fragment string
	// Screenshot, when set, is where a PNG of the page is written.
	Screenshot string
}

// RenderHTML loads the page at path in headless Chromium and returns the
// DOM after its script ran (--dump-dom waits for the load event, and the
// script draws synchronously before it).
func RenderHTML(ctx context.Context, browser, path string, opts RenderOptions) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	url := "file://" + abs
	if opts.Fragment != "" {
		url += "#" + opts.Fragment
	}
	run := func(extra ...string) ([]byte, error) {
		dir, err := os.MkdirTemp("", "memreplay-chromium-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		args := append(chromiumArgs(dir), extra...)
		args = append(args, url)
		var lastErr error
		for attempt := 1; attempt <= crashAttempts; attempt++ {
			cmd := exec.CommandContext(ctx, browser, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err == nil {
				return stdout.Bytes(), nil
			}
			if !crashed(ctx, err) {
				return nil, fmt.Errorf("%s: %v: %s", browser, err, lastLines(stderr.String(), 5))
			}
			lastErr = fmt.Errorf("%w: %s %d times, last: %v: %s", ErrBrowserCrashed, browser, attempt, err, lastLines(stderr.String(), 5))
		}
		return nil, lastErr
	}
	dom, err := run("--dump-dom")
	if err != nil {
		return "", err
	}
	if opts.Screenshot != "" {
		abs, err := filepath.Abs(opts.Screenshot)
		if err != nil {
			return "", err
		}
		if _, err := run("--screenshot=" + abs); err != nil {
			return "", err
		}
	}
	return string(dom), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// SelfCheck is what the page's script wrote into #memreplay-selfcheck
// after drawing.
type SelfCheck struct {
	Rendered bool `json:"rendered"`
	// RenderMS is how long the script took to draw the page, in
	// milliseconds (a measurement, for the docs; never asserted).
	RenderMS float64      `json:"render_ms"`
	Charts   []ChartCheck `json:"charts"`
	// Errors are the errors raised or logged with console.error while the
	// page loaded.
	Errors []string `json:"errors"`
}

// ChartCheck is one chart of the page, as drawn.
type ChartCheck struct {
	Chart   string        `json:"chart"`
	Series  []SeriesCheck `json:"series"`
	Markers int           `json:"markers"`
}

// SeriesCheck is one drawn series: Points counts a line's vertices or a
// bar chart's or segment map's rectangles.
type SeriesCheck struct {
	Name   string `json:"name"`
	Points int    `json:"points"`
}

// Chart returns the chart called name, or nil.
func (s *SelfCheck) Chart(name string) *ChartCheck {
	for i := range s.Charts {
		if s.Charts[i].Chart == name {
			return &s.Charts[i]
		}
	}
	return nil
}

var selfCheckRE = regexp.MustCompile(`(?s)<pre id="memreplay-selfcheck">(.*?)</pre>`)

// ParseSelfCheck reads the self-check from a dumped DOM.
func ParseSelfCheck(dom string) (*SelfCheck, error) {
	m := selfCheckRE.FindStringSubmatch(dom)
	if m == nil || strings.TrimSpace(m[1]) == "" {
		return nil, fmt.Errorf("report: the page wrote no self-check (did its script run?)")
	}
	var sc SelfCheck
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &sc); err != nil {
		return nil, fmt.Errorf("report: self-check: %v", err)
	}
	return &sc, nil
}

var (
	svgOpenRE = regexp.MustCompile(`<svg[^>]*\bdata-chart="([^"]+)"[^>]*>`)
	titleRE   = regexp.MustCompile(`(?s)<title>.*?</title>`)
)

// ExtractFigures cuts each chart out of a dumped DOM as a standalone SVG
// document, by chart name. The script draws with presentation attributes
// only (no style sheet), so the SVG looks the same outside the page. The
// hover texts (<title> elements, one per block of a segment map) are
// dropped: a figure in a document is a static image, and they are most of
// its bytes.
func ExtractFigures(dom string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, loc := range svgOpenRE.FindAllStringSubmatchIndex(dom, -1) {
		name := dom[loc[2]:loc[3]]
		end := strings.Index(dom[loc[1]:], "</svg>")
		if end < 0 {
			return nil, fmt.Errorf("report: chart %s: no closing </svg>", name)
		}
		open := dom[loc[0]:loc[1]]
		if !strings.Contains(open, "xmlns=") {
			open = `<svg xmlns="http://www.w3.org/2000/svg"` + open[len("<svg"):]
		}
		body := titleRE.ReplaceAllString(dom[loc[1]:loc[1]+end+len("</svg>")], "")
		out[name] = []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + open + body + "\n")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("report: the page drew no charts")
	}
	return out, nil
}

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay/speculate"
)

// progress draws a one-line progress report on stderr while a long replay
// runs, when stderr is a terminal; otherwise it stays silent, since every
// redraw would become a line in a log file.
type progress struct {
	w     io.Writer
	label string
	total int64 // 0 when unknown (a streamed trace)
	// bounds, for a snapshot replayed while it is imported, give the
	// total once the import has counted the events (they meet).
	bounds profiler.LengthBounds
	start  time.Time
	last   time.Time
	drawn  bool
}

// progressDelay is how long a run goes before its progress is drawn, so
// short runs print nothing (a variable for the tests).
var progressDelay = time.Second

// progressEvery is the least time between two redraws.
var progressEvery = 200 * time.Millisecond

func newProgress(w io.Writer, label string, total int64, enabled bool) *progress {
	f, ok := w.(*os.File)
	if !enabled || !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return nil
	}
	now := time.Now()
	return &progress{w: w, label: label, total: total, start: now, last: now}
}

// totalFrom makes the total the length bounds meet at, once they do
// (speculate.OpenReplay's speculative replay: until the import is over, the
// events are drawn without a total).
func (p *progress) totalFrom(bounds *speculate.EventBounds) {
	if p != nil && bounds != nil {
		p.bounds = bounds
	}
}

// update is called every few thousand events; it redraws at most five
// times a second and only after the first second, so short runs print
// nothing.
func (p *progress) update(n int64) {
	if p == nil {
		return
	}
	now := time.Now()
	if now.Sub(p.start) < progressDelay || now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	rate := float64(n) / now.Sub(p.start).Seconds()
	if p.total == 0 && p.bounds != nil {
		if lo, hi := p.bounds.Bounds(); lo == hi && lo > 0 {
			p.total = lo
		}
	}
	if p.total > 0 {
		fmt.Fprintf(p.w, "\r%s: %d/%d events (%.0f%%, %.1fM events/s)   ", p.label, n, p.total, 100*float64(n)/float64(p.total), rate/1e6)
	} else {
		fmt.Fprintf(p.w, "\r%s: %d events (%.1fM events/s)   ", p.label, n, rate/1e6)
	}
	p.drawn = true
}

// mixes is sim/par's Progress: mixes done of all, with the time left at
// the rate so far (mixes take alike long on average: they draw from one
// space).
func (p *progress) mixes(done, total int) {
	now := time.Now()
	if now.Sub(p.start) < progressDelay || now.Sub(p.last) < progressEvery || total <= 0 {
		return
	}
	p.last = now
	elapsed := now.Sub(p.start)
	line := fmt.Sprintf("%s: %d/%d mixes (%.0f%%), %s", p.label, done, total, 100*float64(done)/float64(total), elapsed.Round(time.Second))
	if done > 0 && done < total {
		left := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
		line += fmt.Sprintf(", about %s left", left.Round(time.Second))
	}
	fmt.Fprintf(p.w, "\r%s   ", line)
	p.drawn = true
}

func (p *progress) done() {
	if p != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

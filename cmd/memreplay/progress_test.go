package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay/speculate"
)

// fakeBounds are length bounds a test narrows by hand.
type fakeBounds struct{ lo, hi int64 }

func (b *fakeBounds) Bounds() (lo, hi int64) { return b.lo, b.hi }

// A snapshot replayed while it is imported draws its events without a
// total while the length is only bounded, and out of the total from the
// moment the bounds meet; crossed bounds (the speculation given up) draw
// no total. No bounds at all (a replay after the import) draws what it
// knows.
func TestProgressTotalOnceTheBoundsMeet(t *testing.T) {
	oldDelay, oldEvery := progressDelay, progressEvery
	progressDelay, progressEvery = 0, 0
	defer func() { progressDelay, progressEvery = oldDelay, oldEvery }()
	var w bytes.Buffer
	p := &progress{w: &w, label: "replaying x"}
	b := &fakeBounds{lo: 100, hi: 1000}
	p.bounds = b
	line := func(n int64) string {
		w.Reset()
		p.update(n)
		return w.String()
	}
	require.Contains(t, line(10), "replaying x: 10 events (")
	b.lo, b.hi = 600, 500 // crossed
	require.Contains(t, line(20), "replaying x: 20 events (")
	b.lo, b.hi = 400, 400
	require.Contains(t, line(30), "replaying x: 30/400 events (8%")
	b.lo, b.hi = 0, 0 // whatever the bounds do later, the total stays
	require.Contains(t, line(40), "replaying x: 40/400 events (10%")

	// A streamed trace replayed after its import: no total, no bounds (a
	// nil *EventBounds kept as the interface would be called, and panic).
	q := &progress{w: &w, label: "replaying y"}
	q.totalFrom((*speculate.EventBounds)(nil))
	w.Reset()
	q.update(5)
	require.Contains(t, w.String(), "replaying y: 5 events (")
}

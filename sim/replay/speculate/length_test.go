package speculate

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// snapshotMarks models a snapshot's layout: head bytes before the first
// entry, entries of the sizes sizes gives, tail bytes after them; marks
// after batches as the import's pipe hands them over (256 events, then
// twice as many up to 4,096).
func snapshotMarks(head, tail int64, n int64, size func(i int64) int64) (marks []progressMark, fileSize int64) {
	off := head
	batch, next := int64(256), int64(256)
	for i := int64(0); i < n; i++ {
		off += size(i)
		if i+1 == next || i+1 == n {
			marks = append(marks, progressMark{i + 1, off})
			batch = min(2*batch, 4096)
			next += batch
		}
	}
	return marks, off + tail
}

// The bounds hold the length at every mark (the intersection of all the
// estimates so far, as the feed keeps it) on layouts like the snapshots':
// first entries of a stack much larger than later ones, a memo whose
// references grow a few bytes longer after a while, a run of small
// entries at the end (frees), a long end state before the entries and
// settings or annotations after them; and they narrow to within a few
// per cent of it.
func TestEstimateLengthHolds(t *testing.T) {
	for _, c := range []struct {
		name       string
		head, tail int64
		n          int64
		size       func(i int64) int64
	}{
		{"steady", 20000, 600, 2_000_000, func(i int64) int64 { return 40 + i%7 }},
		{"first entries spell their stacks", 20000, 600, 1_000_000, func(i int64) int64 {
			if i < 3000 {
				return 400
			}
			return 38 + i%5
		}},
		{"memo references grow", 100, 600, 1_000_000, func(i int64) int64 {
			// One reference in an entry of about 40 bytes grows from 2
			// bytes (BINGET) to 5 (LONG_BINGET). (A step of 16% a
			// fifth of the way in leaves the bounds: the import's count
			// then discards the speculative replay.)
			if i < 200_000 {
				return 36 + i%3
			}
			return 39 + i%3
		}},
		{"frees at the end", 5000, 600, 300_000, func(i int64) int64 {
			if i >= 300_000-4000 {
				return 22
			}
			return 41 + i%9
		}},
		{"annotations after the entries", 5000, 300 << 10, 300_000, func(i int64) int64 { return 40 + i%3 }},
		{"short", 3000, 600, 5000, func(i int64) int64 { return 300 - i/50 }},
	} {
		marks, size := snapshotMarks(c.head, c.tail, c.n, c.size)
		b := newEventBounds()
		for k := range marks {
			lo, hi := estimateLength(marks[:k+1], size)
			b.narrow(lo, hi)
			lo, hi = b.Bounds()
			require.True(t, lo <= c.n && c.n <= hi, "%s: after %d entries, %d not in [%d, %d]", c.name, marks[k].events, c.n, lo, hi)
			if marks[k].events == c.n/2 && c.n >= 1_000_000 {
				require.Less(t, float64(hi-lo), 0.05*float64(c.n), "%s: halfway", c.name)
			}
		}
	}
}

// Before estimateFrom entries, and without a size to go by, the bounds
// are the entries seen and no upper one.
func TestEstimateLengthEarly(t *testing.T) {
	lo, hi := estimateLength([]progressMark{{256, 10000}, {768, 30000}}, 1<<30)
	require.Equal(t, int64(768), lo)
	require.Equal(t, int64(math.MaxInt64), hi)
	lo, hi = estimateLength([]progressMark{{256, 10000}, {8192, 300000}}, 200000)
	require.Equal(t, int64(8192), lo)
	require.Equal(t, int64(math.MaxInt64), hi)
}

// The feed narrows its bounds as the import tells it where the entries
// ended, and when the import is over meets them at its count if the count
// is within them; a count outside gives the guess up, as do bounds that
// cross, and confirmed takes only bounds that met at the count.
func TestSpecFeedBounds(t *testing.T) {
	marks, size := snapshotMarks(1000, 600, 100_000, func(i int64) int64 { return 40 })
	feed := func() *specFeed {
		f := newSpecFeed(size)
		for _, m := range marks {
			f.Progress(m.events, m.offset)
		}
		return f
	}
	opened := func(n int64) *trace.Opened {
		l := &trace.EventLog{}
		for range n {
			l.Append(&trace.Event{Action: trace.ActionAlloc, Size: 512})
		}
		return &trace.Opened{Packed: &trace.Packed{Events: l}}
	}

	f := feed()
	lo, hi := f.bounds.Bounds()
	require.LessOrEqual(t, lo, int64(100_000))
	require.GreaterOrEqual(t, hi, int64(100_000))
	require.False(t, f.wasAborted())
	o := opened(100_000)
	f.finish(o, nil)
	require.False(t, f.wasAborted())
	lo, hi = f.bounds.Bounds()
	require.Equal(t, [2]int64{100_000, 100_000}, [2]int64{lo, hi})
	require.True(t, confirmed(o, trace.Header{}, true, f.bounds, &replay.Result{}, nil))

	// A count the bounds did not allow (the entries were not what the
	// bytes said).
	f = feed()
	f.finish(opened(90_000), nil)
	require.True(t, f.wasAborted())
	lo, hi = f.bounds.Bounds()
	require.NotEqual(t, lo, hi)
	require.False(t, confirmed(opened(90_000), trace.Header{}, true, f.bounds, &replay.Result{}, nil))

	// Crossed bounds: more entries than the estimate allowed (the file's
	// last bytes said to be entries of a few thousand at most).
	f = newSpecFeed(size)
	f.Progress(8192, 8192*40)
	f.Progress(16384, size)
	require.False(t, f.wasAborted())
	f.Progress(32768, size)
	require.True(t, f.wasAborted())
}

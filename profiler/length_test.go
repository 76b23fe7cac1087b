package profiler_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// lengthWorkload records a workload on two devices, with events of a
// device out of range mixed in (a lenient replay skips them, so the
// profiler's steps skip their indices), scratch buffers freed at once and
// longer-lived ones freed later, some large enough to make segments come
// and go, and fragmentation that changes from sample to sample.
func lengthWorkload(t *testing.T, events int) *trace.Trace {
	t.Helper()
	st := trace.NewStacks()
	var sites []trace.StackID
	for i := range 20 {
		sites = append(sites, st.Intern([]trace.Frame{{Name: "layer", Filename: "model.py", Line: int64(i)}}))
	}
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay",
		Devices: []trace.Device{{Index: 0, Capacity: 8 << 30}, {Index: 1, Capacity: 8 << 30}}}, Stacks: st}
	rng := rand.New(rand.NewPCG(3, 9))
	type dev struct {
		a    *allocator.Allocator
		rec  *replay.Recording
		live []*allocator.Block
	}
	var devs []*dev
	for i := range 2 {
		_, a := newAllocator(t, 8<<30, "", i)
		d := &dev{a: a}
		d.rec = replay.Record(a, int32(i), func(e *trace.Event) {
			e.TimeUS = int64(len(tr.Events)) * 10
			tr.Events = append(tr.Events, *e)
			if rng.IntN(40) == 0 {
				tr.Events = append(tr.Events, trace.Event{Action: trace.ActionAlloc, Device: -1, Addr: 1, Size: 512})
			}
		})
		devs = append(devs, d)
	}
	for len(tr.Events) < events {
		d := devs[rng.IntN(2)]
		if len(d.live) > 0 && rng.IntN(5) < 2 {
			k := rng.IntN(len(d.live))
			require.NoError(t, d.a.Free(d.live[k]))
			d.live = append(d.live[:k], d.live[k+1:]...)
			continue
		}
		size := uint64(1+rng.IntN(2048)) * 512
		if rng.IntN(10) == 0 {
			size = uint64(1+rng.IntN(64)) << 20
		}
		d.rec.SetStack(sites[rng.IntN(len(sites))])
		b, err := d.a.Malloc(size, 0)
		require.NoError(t, err)
		d.live = append(d.live, b)
		if rng.IntN(200) == 0 {
			require.NoError(t, d.a.EmptyCache())
		}
	}
	for _, d := range devs {
		d.rec.Stop()
	}
	return tr
}

// scriptedBounds narrows bounds around n at random as the profiler reads
// them, and meets at n after meetAt reads (never when negative: then only
// once final is set, as sim/replay's bounds meet once the import is over).
type scriptedBounds struct {
	n, lo, hi int64
	reads     int
	meetAt    int
	final     bool
	rng       *rand.Rand
}

func (s *scriptedBounds) Bounds() (int64, int64) {
	s.reads++
	if s.final || (s.meetAt >= 0 && s.reads >= s.meetAt) {
		return s.n, s.n
	}
	if s.rng.IntN(4) == 0 {
		s.lo += (s.n - s.lo) * int64(s.rng.IntN(3)) / 4
		if s.hi == math.MaxInt64 {
			s.hi = s.n * int64(2+s.rng.IntN(3))
		} else {
			s.hi -= (s.hi - s.n) * int64(s.rng.IntN(3)) / 4
		}
	}
	return s.lo, s.hi
}

// The timeline of a trace whose length is known only at the end (bounds
// that narrow while the replay runs: sim/replay's speculative replay) is
// the one of the length given up front, with the same interval and
// fragmentation maxima: the whole profile is equal. Lengths around the
// timeline's capacity and its multiples, one device and two, events the
// replay skips, bounds that meet during the replay, at its first sample,
// or only at Finish.
func TestLengthBoundsSameProfile(t *testing.T) {
	full := lengthWorkload(t, 6000)
	rng := rand.New(rand.NewPCG(5, 5))
	for _, ms := range []int{4, 10, 64, 1000} {
		m := ms - 2
		lengths := map[int]bool{0: true, 1: true, 2: true, 3: true, len(full.Events): true}
		for _, k := range []int{1, 2, 3, 7, 50, 100} {
			for _, d := range []int{-1, 0, 1} {
				if n := k*m + d; n >= 0 && n <= len(full.Events) {
					lengths[n] = true
				}
			}
		}
		for range 6 {
			lengths[rng.IntN(len(full.Events)+1)] = true
		}
		for n := range lengths {
			tr := *full
			tr.Events = full.Events[:n]
			oneDev := tr
			oneDev.Events = nil
			for _, e := range tr.Events {
				if e.Device != 1 {
					oneDev.Events = append(oneDev.Events, e)
				}
			}
			for _, tr := range []*trace.Trace{&tr, &oneDev} {
				n := int64(len(tr.Events))
				want, wantRes := profileOf(t, tr, profiler.Options{MaxSamples: ms, ExpectedEvents: n})
				for _, meetAt := range []int{-1, 1, 2, 5, 40, 300} {
					b := &scriptedBounds{n: n, hi: math.MaxInt64, meetAt: meetAt, rng: rand.New(rand.NewPCG(uint64(n), uint64(meetAt+1)))}
					if n == 0 {
						b.meetAt = -1
					}
					got, gotRes := profileOf(t, tr, profiler.Options{MaxSamples: ms, EventBounds: b}, func() { b.final = true })
					require.Equal(t, wantRes, gotRes)
					require.Equal(t, want, got, "MaxSamples %d, %d events, bounds meet at read %d", ms, n, meetAt)
				}
			}
		}
	}
}

// profileOf replays tr leniently with a profiler of opts; before Finish
// it calls each of beforeFinish.
func profileOf(t *testing.T, tr *trace.Trace, opts profiler.Options, beforeFinish ...func()) (*profiler.Profile, *replay.Result) {
	t.Helper()
	p := profiler.New(tr.Stacks, opts)
	res, err := replay.Run(tr.NewReader(), replay.Options{Recorder: p, Lenient: true})
	require.NoError(t, err)
	for _, f := range beforeFinish {
		f()
	}
	return p.Finish(), res
}

// Bounds that crossed (the caller gave the replay up) stop the fine
// samples; Finish still returns a profile.
func TestLengthBoundsCrossed(t *testing.T) {
	tr := lengthWorkload(t, 500)
	b := &crossedBounds{}
	prof, _ := profileOf(t, tr, profiler.Options{MaxSamples: 10, EventBounds: b})
	require.Equal(t, int64(len(tr.Events)), prof.Events)
	require.Equal(t, 2, b.reads, "read at New and at Finish only")
}

type crossedBounds struct{ reads int }

func (c *crossedBounds) Bounds() (int64, int64) { c.reads++; return 10, 5 }

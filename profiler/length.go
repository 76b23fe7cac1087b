package profiler

// A timeline spaced by a length not yet known.
//
// Given the trace's length n (Options.ExpectedEvents), the timeline takes
// a sample every E = ceil(n/(MaxSamples-2)) events: at the first event at
// or after E-1, then at the first at or after the next multiple of E less
// one (Profiler.after), and at the last event; each sample holds the
// state after its event and the maxima since the sample before, and each
// one's fragmentation enters the profile's maxima. A replay that runs
// while its snapshot is still imported (sim/replay's speculative replay)
// does not know n, only bounds on it that narrow as the import goes on
// (Options.EventBounds: sim/replay/speculate.EventBounds), and n once the import is
// over, when the replay is nearly done. It gets the same timeline this way:
//
//   - while n is not known, it takes a fine sample wherever the timeline
//     of some length within the bounds would take one: nextFine, the
//     least of Profiler.after over every interval E the bounds allow.
//     Each fine sample's maxima are those since the fine sample before,
//     and its fragmentation is not yet counted. The bounds only narrow,
//     so whatever length is in the end, every sample its timeline takes
//     was taken as a fine sample (the events a replay's steps skip
//     included: after is computed from the event the sample fell on);
//   - once n is known (the bounds meet, or Finish), settleLength walks the
//     fine samples as the timeline of n walks the events: a fine sample
//     at or after the next sample's event is kept, with the maxima of the
//     fine samples dropped since the one before folded in (merge: the
//     later instantaneous values, the larger maxima, which is what one
//     longer interval measured), and its fragmentation counted. What
//     follows the last kept one is carried into the next sample. From
//     then on the profiler samples as with ExpectedEvents.
//
// So the timeline, the interval and the fragmentation maxima are the
// ones ExpectedEvents = n gives, equal field for field (a maximum over the
// fine intervals is the maximum over their union: every value in between
// was reached by an increase that the fine interval it fell in saw). The
// cost is the fine samples that are not kept: about as many, near the
// j-th sample, as the bounds allow intervals then (the j-th samples of
// the intervals allowed are j apart), so the narrower the bounds the
// fewer; for the 1 GB snapshot of docs/performance.md, about 2.3% of its
// events.
//
// Bounds that turn out wrong (a length outside them) leave samples
// missing: the caller must then not use the profile (sim/replay discards
// such a replay). Finish with bounds that never met settles on the
// events replayed.

import "math"

// LengthBounds gives bounds on a trace's length while it is imported:
// lo <= n <= hi, narrowing as the import goes on, lo == hi == n once n is
// known. It is read from the replay's goroutine while another narrows it.
type LengthBounds interface {
	Bounds() (lo, hi int64)
}

// nextFine is the event of the fine sample after one at index: the least
// event at which the timeline of any length within the bounds samples
// next. Bounds that met settle the timeline instead; bounds that crossed
// (the caller gave the replay up) stop the sampling.
func (p *Profiler) nextFine(index int64) int64 {
	lo, hi := p.bounds.Bounds()
	switch {
	case lo == hi && lo > 0:
		p.settleLength(lo)
		return p.nextSample
	case lo > hi:
		return math.MaxInt64
	}
	m := int64(p.opts.MaxSamples - 2)
	return nextPoint(index, interval(lo, m), interval(hi, m))
}

// interval is the timeline's interval for a trace of n events with m
// samples: ceil(n/m), at least 1, without overflowing.
func interval(n, m int64) int64 {
	if n <= 0 {
		return 1
	}
	e := n / m
	if n%m != 0 {
		e++
	}
	return max(e, 1)
}

// nextPoint is the least q > i such that q+1 is a multiple of some E in
// [a, b], 1 <= a <= b: the least of ((i+1)/E)*E + E - 1 over those E.
func nextPoint(i, a, b int64) int64 {
	t := i + 2 // q+1 >= t
	switch {
	case t < a:
		return a - 1 // E = a, the first multiple of any
	case t <= b:
		return t - 1 // E = t
	}
	best := int64(math.MaxInt64)
	if b-a <= t/a-t/b {
		// Fewer intervals than multipliers: the next multiple of each.
		for e := a; e <= b; e++ {
			if q := (t + e - 1) / e * e; q < best {
				best = q
				if q == t {
					break
				}
			}
		}
		return best - 1
	}
	// The multiples j*E of one j are those of j in [j*a, j*b]; j starts
	// at the least whose range reaches t (which always has one), and
	// stops once j*a is past the best found.
	for j := (t + b - 1) / b; j*a < best; j++ {
		q := max(j*a, (t+j-1)/j*j)
		if q <= j*b && q < best {
			best = q
			if q == t {
				break
			}
		}
	}
	return best - 1
}

// fineChunk is the length of a chunk of fine samples.
const fineChunk = 4096

// addFine keeps a fine sample.
func (p *Profiler) addFine(s Sample) {
	if n := len(p.fine); n == 0 || len(p.fine[n-1]) == fineChunk {
		p.fine = append(p.fine, make([]Sample, 0, fineChunk))
	}
	last := &p.fine[len(p.fine)-1]
	*last = append(*last, s)
}

// settleLength makes the timeline that of a trace of n events from the fine
// samples (see the file comment) and samples as ExpectedEvents = n would
// from then on.
func (p *Profiler) settleLength(n int64) {
	p.bounds = nil
	if n > 0 {
		p.spaceFor(n)
	}
	next := p.every - 1
	var acc Sample
	has := false
	for _, chunk := range p.fine {
		for _, s := range chunk {
			if has {
				s = merge(acc, s)
			}
			if s.Event >= next {
				p.record(s)
				next = p.after(s.Event)
				has = false
			} else {
				acc, has = s, true
			}
		}
	}
	p.fine = nil
	p.carry, p.hasCarry = acc, has
	p.nextSample = next
}

package workers

// The clock: wall time and compute time (see the package comment, "The
// clock"). Every worker is either computing (its next event is a given amount
// of trial compute away) or waiting (a device call, a gap, a stagger: its next
// step is at a given wall time). Computing workers share the GPU: while n of
// them compute, each progresses at speed(n) trial-seconds per wall-second.
//
// The scheduler keeps a virtual compute clock v that advances at speed(n) for
// every computing worker alike, so a computing worker's next event happens
// when v reaches a fixed key (v at the time it began computing plus the
// compute it needs). Keys do not change when n changes; only the mapping of
// v to wall time does. That is what lets two small queues order the steps of
// all workers exactly, without re-keying anyone when a worker starts or
// stops computing.

// entry is a worker's place in one of the queues: key is a v target (compute
// queue) or a wall time in nanoseconds (wait queue).
type entry struct {
	key float64
	w   int
}

// sortedQueue holds entries in order of key, then worker index (the tie rule
// that makes runs deterministic), the least last: a run has a handful of
// workers, so a sorted slice beats a binary heap (one compare-and-shift
// loop to insert, none to take the least; the heap's sift-down on every
// event was 4% of the trial model). Its length is kept apart from the
// slice, which only grows: a push that stored the slice back (its
// pointer) made a write barrier per event, 2% of the trial model while
// the collector marks.
type sortedQueue struct {
	e []entry // e[:n] are the entries
	n int
}

// before says whether a comes before b.
func before(a, b entry) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.w < b.w
}

func (h *sortedQueue) push(e entry) {
	if h.n == len(h.e) {
		h.e = append(h.e, entry{})
		h.e = h.e[:cap(h.e)]
	}
	s := h.e
	i := h.n
	for i > 0 && before(s[i-1], e) {
		s[i] = s[i-1]
		i--
	}
	s[i] = e
	h.n++
}

func (h *sortedQueue) len() int { return h.n }

// min is the least entry; the queue must not be empty.
func (h *sortedQueue) min() entry { return h.e[h.n-1] }

func (h *sortedQueue) pop() entry {
	h.n--
	return h.e[h.n]
}

// scheduler is the run's one clock.
type scheduler struct {
	share   float64 // Compute.Share
	now     float64 // wall time, ns
	v       float64 // virtual compute time, ns
	compute sortedQueue
	wait    sortedQueue
	// spN is 1 + the count of computing workers sp was last worked out
	// for (0: none): next asks once per event, the count rarely changes.
	spN int
	sp  float64
}

// speed is the rate at which each of n computing trials progresses: a trial
// alone uses share of the GPU, so up to 1/share of them run at full speed and
// more divide the GPU between them.
func speed(n int, share float64) float64 {
	if n == 0 {
		return 1
	}
	s := 1 / (float64(n) * share)
	if s > 1 {
		return 1
	}
	return s
}

// computeFor schedules w's next step after ns nanoseconds of its trial's
// compute.
func (s *scheduler) computeFor(w int, ns float64) {
	s.compute.push(entry{key: s.v + ns, w: w})
}

// waitFor schedules w's next step ns nanoseconds of wall time from now.
func (s *scheduler) waitFor(w int, ns float64) {
	s.wait.push(entry{key: s.now + ns, w: w})
}

// again is computeFor(w, ns) followed by next, when next would return w:
// it says whether w's step after ns of compute is the earliest of all, and
// then advances the clock to it exactly as next would have (the same
// speed, the same arithmetic, the same tie rule), without w entering the
// queue. When it is not, the clock is unchanged and the caller pushes.
func (s *scheduler) again(w int, ns float64) bool {
	key := s.v + ns
	if n := s.compute.n; n > 0 {
		if m := s.compute.e[n-1]; m.key < key || m.key == key && m.w < w {
			return false
		}
	}
	tc := s.now
	if key != s.v {
		// Else the division is of 0, and tc is now: most steps cost no
		// compute (the events of one op share a time).
		if n := s.compute.n + 1; s.spN != n+1 {
			s.spN, s.sp = n+1, speed(n, s.share)
		}
		tc += (key - s.v) / s.sp
	}
	if n := s.wait.n; n > 0 {
		if m := s.wait.e[n-1]; m.key < tc || m.key == tc && m.w < w {
			return false
		}
	}
	s.now, s.v = tc, key
	return true
}

// computing is how many workers compute now.
func (s *scheduler) computing() int { return s.compute.len() }

// next advances the clock to the earliest step of any worker and returns the
// worker; ok is false when no worker has a step left.
func (s *scheduler) next() (w int, ok bool) {
	hasC, hasW := s.compute.len() > 0, s.wait.len() > 0
	if !hasC && !hasW {
		return 0, false
	}
	var sp, tc float64
	if hasC {
		if n := s.compute.len(); s.spN != n+1 {
			s.spN, s.sp = n+1, speed(n, s.share)
		}
		sp = s.sp
		tc = s.now + (s.compute.min().key-s.v)/sp
	}
	takeCompute := hasC && (!hasW || tc < s.wait.min().key || (tc == s.wait.min().key && s.compute.min().w < s.wait.min().w))
	if takeCompute {
		e := s.compute.pop()
		s.now = tc
		s.v = e.key // exact, so that float rounding never reorders a worker's own steps
		return e.w, true
	}
	e := s.wait.pop()
	if hasC {
		s.v += (e.key - s.now) * sp
	}
	s.now = e.key
	return e.w, true
}

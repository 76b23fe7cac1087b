package profiler

// The detail around the peak.
//
// The timeline keeps at most Options.MaxSamples samples, so on a long trace
// one sample covers thousands of events (2,048 on a 25-million-event
// trace), and a page zoomed into the peak shows a handful of points where
// the user wants every allocation. Keeping every event is out of the
// question (the memory would grow with the trace), but the peak is one
// place: Options.DetailEvents keeps the state after every event for a
// window of that many events centred on the peak of live bytes.
//
// A ring holds the last DetailEvents points (a fixed 40 bytes each). When
// the total's live bytes reach a new peak, the window is due half a ring
// later (or when the ring first fills, for a peak near the start); a
// higher peak before then moves it. When it falls due, the ring
// is copied out, so the copy happens once per peak that stays the highest
// for half a window: on a training trace, once per step that climbs above
// every earlier one. The cost per event is one point written into the
// ring; the memory is two rings, whatever the trace's length. The ring
// is sized for the events expected (Options.ExpectedEvents) when fewer
// than the window: most real snapshots have fewer events than the window,
// and a report opened a 640 KiB ring for each of them. Without an
// expected count, or past it, it is allocated as it fills (append doubles
// it up to its length), which cost a real snapshot's replay 4% in copies.

// DetailPoint is the state after one event (the total over the devices).
type DetailPoint struct {
	Event          int64  `json:"event"`
	TimeUS         int64  `json:"time_us,omitempty"`
	LiveBytes      uint64 `json:"live_bytes"`
	ReservedBytes  uint64 `json:"reserved_bytes"`
	RequestedBytes uint64 `json:"requested_bytes"`
}

type detail struct {
	ring  []DetailPoint // circular; len grows to n, then stays
	n     int           // the ring's length: Options.DetailEvents
	next  int           // where the next point goes
	full  bool          // the ring has wrapped
	last  int64         // the last event recorded
	peak  uint64        // the live bytes of the peak whose window is open or kept
	due   int64         // the event that completes the open window; -1: none open
	kept  []DetailPoint // the last completed window
	ready bool          // kept holds the window of the highest peak
	given bool          // a profile holds kept: the next keep makes another
}

// newDetail keeps windows of n events; expected is the trace's length
// when known (0: not known).
func newDetail(n int, expected int64) *detail {
	d := &detail{n: n, last: -1, due: -1}
	if expected > 0 {
		d.ring = make([]DetailPoint, 0, min(int64(n), expected))
	}
	return d
}

// step records the state after the event at index; c is the total.
func (d *detail) step(index, timeUS int64, c *counters) {
	if index <= d.last {
		return
	}
	d.last = index
	pt := DetailPoint{Event: index, TimeUS: timeUS, LiveBytes: c.live, ReservedBytes: c.reserved, RequestedBytes: c.requested}
	if d.full {
		d.ring[d.next] = pt
	} else {
		d.ring = append(d.ring, pt) // before the first wrap, next == len(ring)
	}
	d.next++
	if d.next == d.n {
		d.next, d.full = 0, true
	}
	if c.peakLive > d.peak && c.peakLiveEvent >= 0 {
		d.peak, d.ready = c.peakLive, false
		d.due = c.peakLiveEvent + int64(d.n/2)
	}
	// A peak less than half a window from the start gets the rest of its
	// window after it: the window is complete once the ring is full.
	if d.due >= 0 && index >= d.due && d.full {
		d.keep()
	}
}

// keep copies the ring, oldest first, into kept.
func (d *detail) keep() {
	if d.given {
		d.kept, d.given = nil, false
	}
	if n := len(d.ring); cap(d.kept) < n {
		// Made once at the ring's length: two appends from nothing
		// allocated it twice over.
		d.kept = make([]DetailPoint, 0, n)
	}
	d.kept = d.kept[:0]
	if d.full {
		d.kept = append(d.kept, d.ring[d.next:]...)
	}
	d.kept = append(d.kept, d.ring[:d.next]...)
	d.due, d.ready = -1, true
}

// window returns the points around the highest peak, or nil when no event
// made a peak. The first call's are the kept window itself (a later keep
// makes another), a later call's a copy.
func (d *detail) window() []DetailPoint {
	if d == nil {
		return nil
	}
	if !d.ready && d.due >= 0 {
		// The trace ended before the window was complete: its end is in
		// the ring.
		d.keep()
	}
	if !d.ready || len(d.kept) == 0 {
		return nil
	}
	if d.given {
		return append([]DetailPoint(nil), d.kept...)
	}
	d.given = true
	return d.kept[:len(d.kept):len(d.kept)]
}

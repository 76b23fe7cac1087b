package placement

import (
	"slices"
	"sort"
)

// findConflict returns two buffers that overlap in time and address. It
// shares nothing with the solver, so that Verify checks the solver rather
// than repeating it: a sweep over time keeps the live buffers sorted by
// offset, and a buffer that starts must fit between its neighbours there.
// Ends come before starts at the same time, since lifetimes are half-open.
func findConflict(bufs []Buffer, offsets []uint64) (int, int, bool) {
	type event struct {
		t     int64
		start bool
		i     int
	}
	evs := make([]event, 0, 2*len(bufs))
	for i, b := range bufs {
		evs = append(evs, event{b.Lower, true, i}, event{b.Upper, false, i})
	}
	sort.Slice(evs, func(a, b int) bool {
		if evs[a].t != evs[b].t {
			return evs[a].t < evs[b].t
		}
		return !evs[a].start && evs[b].start
	})
	var live []int // by offset
	pos := func(off uint64) int {
		return sort.Search(len(live), func(k int) bool { return offsets[live[k]] >= off })
	}
	for _, e := range evs {
		off := offsets[e.i]
		if !e.start {
			k := pos(off)
			for k < len(live) && live[k] != e.i {
				k++
			}
			if k < len(live) {
				live = slices.Delete(live, k, k+1)
			}
			continue
		}
		k := pos(off)
		if k > 0 {
			p := live[k-1]
			if offsets[p]+bufs[p].Size > off {
				return p, e.i, true
			}
		}
		if k < len(live) {
			q := live[k]
			if offsets[q] < off+bufs[e.i].Size {
				return q, e.i, true
			}
		}
		live = slices.Insert(live, k, e.i)
	}
	return 0, 0, false
}

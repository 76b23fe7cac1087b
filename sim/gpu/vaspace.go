package gpu

// vaSpace hands out one process's virtual addresses, first fit by address.
//
// It keeps the free ranges, sorted and coalesced. The lowest fitting address
// wins so that a freed range is reused by the next request it can hold,
// which is what drivers do and what makes layouts reproducible. A process
// holds tens to a few thousand ranges, so a sorted slice with linear search
// is fast enough and easy to check.
type vaSpace struct {
	free []span
}

// span is the half-open range [lo, hi).
type span struct{ lo, hi uint64 }

func newVASpace(base, size uint64) *vaSpace {
	return &vaSpace{free: []span{{base, base + size}}}
}

// alloc returns the lowest address aligned to align (a power of two) with
// size free bytes after it, or false when no free range holds it.
func (v *vaSpace) alloc(size, align uint64) (uint64, bool) {
	for i, s := range v.free {
		start := alignUp(s.lo, align)
		if start < s.lo || start >= s.hi || s.hi-start < size {
			continue
		}
		// The range's rest replaces it in place: a new list per call was
		// a heap allocation per cudaMalloc.
		end := start + size
		switch {
		case start > s.lo && end < s.hi:
			v.free[i].hi = start
			v.free = append(v.free, span{})
			copy(v.free[i+2:], v.free[i+1:])
			v.free[i+1] = span{end, s.hi}
		case start > s.lo:
			v.free[i].hi = start
		case end < s.hi:
			v.free[i].lo = end
		default:
			v.free = append(v.free[:i], v.free[i+1:]...)
		}
		return start, true
	}
	return 0, false
}

// release returns [addr, addr+size), which the caller got from alloc, and
// merges it with free neighbours so large requests can use it again.
func (v *vaSpace) release(addr, size uint64) {
	end := addr + size
	i := 0
	for i < len(v.free) && v.free[i].lo < addr {
		i++
	}
	joinPrev := i > 0 && v.free[i-1].hi == addr
	joinNext := i < len(v.free) && v.free[i].lo == end
	switch {
	case joinPrev && joinNext:
		v.free[i-1].hi = v.free[i].hi
		v.free = append(v.free[:i], v.free[i+1:]...)
	case joinPrev:
		v.free[i-1].hi = end
	case joinNext:
		v.free[i].lo = addr
	default:
		v.free = append(v.free, span{})
		copy(v.free[i+1:], v.free[i:])
		v.free[i] = span{addr, end}
	}
}

// freeBytes is the sum of the free ranges.
func (v *vaSpace) freeBytes() uint64 {
	var n uint64
	for _, s := range v.free {
		n += s.hi - s.lo
	}
	return n
}

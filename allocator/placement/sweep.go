package placement

import (
	"slices"
)

// instance is a problem (or one partition of it) with time cut into
// sections: lo[i], hi[i] are the first and one past the last section
// buffer i lives in.
type instance struct {
	index  []int // position of each buffer in the caller's input
	size   []uint64
	align  []uint64 // at least 1
	lo, hi []int32
	nsec   int
	secSum []uint64  // bytes alive in each section
	ranks  [][]int32 // each buffer's position in each heuristic order, the best first
}

// newInstance builds the instance of bufs[index...] (all of bufs when
// index is nil).
func newInstance(bufs []Buffer, index []int) *instance {
	if index == nil {
		index = make([]int, len(bufs))
		for i := range index {
			index[i] = i
		}
	}
	n := len(index)
	in := &instance{index: index, size: make([]uint64, n), align: make([]uint64, n),
		lo: make([]int32, n), hi: make([]int32, n)}
	points := make([]int64, 0, 2*n)
	for _, idx := range index {
		points = append(points, bufs[idx].Lower, bufs[idx].Upper)
	}
	slices.Sort(points)
	points = slices.Compact(points)
	at := func(t int64) int32 {
		k, _ := slices.BinarySearch(points, t)
		return int32(k)
	}
	for j, idx := range index {
		b := bufs[idx]
		in.size[j], in.align[j] = b.Size, max(b.Alignment, 1)
		in.lo[j], in.hi[j] = at(b.Lower), at(b.Upper)
	}
	in.nsec = max(len(points)-1, 0)
	diff := make([]uint64, in.nsec+1)
	for j := range index {
		diff[in.lo[j]] += in.size[j]
		diff[in.hi[j]] -= in.size[j] // wraps; the running sum is exact
	}
	in.secSum = make([]uint64, in.nsec)
	var run uint64
	for s := range in.secSum {
		run += diff[s]
		in.secSum[s] = run
	}
	return in
}

// liveBound is the largest sum of sizes alive in one section.
func (in *instance) liveBound() uint64 {
	var m uint64
	for _, v := range in.secSum {
		m = max(m, v)
	}
	return m
}

// partitions splits the buffers where no buffer lives across a section
// boundary; each part is a list of input positions.
func (in *instance) partitions() [][]int {
	if len(in.index) == 0 {
		return nil
	}
	// cross[s]: buffers alive in both section s and s+1.
	cross := make([]int, in.nsec+1)
	for j := range in.index {
		if in.hi[j]-in.lo[j] > 1 {
			cross[in.lo[j]]++
			cross[in.hi[j]-1]--
		}
	}
	part := make([]int32, in.nsec) // part number of each section
	var p int32
	run := 0
	for s := 0; s < in.nsec; s++ {
		part[s] = p
		run += cross[s]
		if run == 0 {
			p++
		}
	}
	parts := make([][]int, p+1)
	for j, idx := range in.index {
		k := part[in.lo[j]]
		parts[k] = append(parts[k], idx)
	}
	return slices.DeleteFunc(parts, func(x []int) bool { return len(x) == 0 })
}

// alignUp rounds x up to a multiple of a (a power of two).
func alignUp(x, a uint64) uint64 {
	return (x + a - 1) &^ (a - 1)
}

// overlaps says buffers i and j of in live at the same time.
func (in *instance) overlaps(i, j int) bool {
	return in.lo[i] < in.hi[j] && in.lo[j] < in.hi[i]
}

// bottom picks the buffers alive in every section of in, to be stacked at
// the bottom: local indices, the input positions of the others, and the
// stack's height. A buffer qualifies when its size is a multiple of every
// alignment in in, so that the buffers above stay aligned.
func (in *instance) bottom() (stack []int, rest []int, height uint64) {
	var a uint64 = 1
	for _, x := range in.align {
		a = max(a, x)
	}
	for j := range in.size {
		if in.lo[j] == 0 && int(in.hi[j]) == in.nsec && in.size[j]%a == 0 {
			stack = append(stack, j)
			height += in.size[j]
		} else {
			rest = append(rest, in.index[j])
		}
	}
	return stack, rest, height
}

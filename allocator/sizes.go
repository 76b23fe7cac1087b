package allocator

import "math/bits"

// sizeNode counts the free set's buckets of one block size over every
// stream: refs those in the index, full those holding blocks. A bucket
// points at its size's node for as long as it is in the index, so that a
// bucket filling or emptying, on a cache hit's path, counts without a
// lookup; the node is looked up only when a bucket is made.
type sizeNode struct {
	size       uint64
	refs, full int
	at         int // index in sizeTable.all
}

// sizeTable holds the nodes, and the largest size with blocks, so that
// FreeSummary needs no walk over the streams (a job may use thousands).
// The largest is kept as sizes come and go and found again, by a walk over
// the distinct sizes, only after the largest size's last block went.
type sizeTable struct {
	nodes sizeIndex   // the nodes by size
	all   []*sizeNode // the nodes again, for a walk quicker than the index's
	top   uint64      // the largest size with blocks, unless stale
	stale bool
	spare []*sizeNode
	slab  slab[sizeNode]
}

// ref returns the node of size, made on first use, for a new bucket.
func (t *sizeTable) ref(size uint64) *sizeNode {
	n := t.nodes.get(size)
	if n == nil {
		if k := len(t.spare); k > 0 {
			n = t.spare[k-1]
			t.spare = t.spare[:k-1]
			*n = sizeNode{size: size}
		} else {
			n = t.slab.get()
			n.size = size
		}
		t.nodes.put(n)
		n.at = len(t.all)
		t.all = append(t.all, n)
	}
	n.refs++
	return n
}

// unref drops a swept bucket's reference.
func (t *sizeTable) unref(n *sizeNode) {
	if n.refs--; n.refs == 0 {
		t.nodes.del(n.size)
		last := t.all[len(t.all)-1]
		t.all[n.at], last.at = last, n.at
		t.all[len(t.all)-1] = nil
		t.all = t.all[:len(t.all)-1]
		if len(t.spare) < 1024 {
			t.spare = append(t.spare, n)
		}
	}
}

// filled and emptied count a bucket of n's size gaining its first block and
// losing its last.
func (t *sizeTable) filled(n *sizeNode) {
	n.full++
	if n.size > t.top {
		t.top = n.size
	}
}

func (t *sizeTable) emptied(n *sizeNode) {
	if n.full--; n.full == 0 && n.size == t.top {
		t.stale = true
	}
}

// largest is the largest size with blocks, or 0.
func (t *sizeTable) largest() uint64 {
	if t.stale {
		t.top = 0
		for _, n := range t.all {
			if n.full > 0 {
				t.top = max(t.top, n.size)
			}
		}
		t.stale = false
	}
	return t.top
}

// sizeIndex finds a size's node: open addressing with linear probing, at
// most half full, and deletion by shifting the rest of a probe run back
// (no tombstones). It was a Go map, whose insert and delete were 9% of the
// trial model's time: every bucket made at a new size (a split's
// remainder, mostly) inserts, and every sweep deletes what it swept.
// Sizes are multiples of 512, so the hash drops those bits first.
type sizeIndex struct {
	slots []*sizeNode
	n     int
	shift uint8
}

func (x *sizeIndex) home(size uint64) int {
	return int(((size >> 9) * 0x9E3779B97F4A7C15) >> x.shift)
}

// get returns size's node, or nil.
func (x *sizeIndex) get(size uint64) *sizeNode {
	if x.n == 0 {
		return nil
	}
	mask := len(x.slots) - 1
	for i := x.home(size); ; i = (i + 1) & mask {
		n := x.slots[i]
		if n == nil || n.size == size {
			return n
		}
	}
}

// put adds n, whose size must not be in the index.
func (x *sizeIndex) put(n *sizeNode) {
	if 2*(x.n+1) > len(x.slots) {
		old := x.slots
		size := max(2*len(old), 16)
		x.slots = make([]*sizeNode, size)
		x.shift = uint8(64 - bits.Len(uint(size-1)))
		for _, o := range old {
			if o != nil {
				x.place(o)
			}
		}
	}
	x.place(n)
	x.n++
}

func (x *sizeIndex) place(n *sizeNode) {
	mask := len(x.slots) - 1
	i := x.home(n.size)
	for x.slots[i] != nil {
		i = (i + 1) & mask
	}
	x.slots[i] = n
}

// del removes size, which must be in the index, and moves back the
// entries of its probe run that may sit closer to their home.
func (x *sizeIndex) del(size uint64) {
	mask := len(x.slots) - 1
	i := x.home(size)
	for x.slots[i].size != size {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; x.slots[j] != nil; j = (j + 1) & mask {
		// The entry at j is dist past its home; the hole is gap before j.
		if dist, gap := (j-x.home(x.slots[j].size))&mask, (j-i)&mask; dist >= gap {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = nil
	x.n--
}

// len is the number of nodes held.
func (x *sizeIndex) len() int { return x.n }

package allocator

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
	nodes map[uint64]*sizeNode
	all   []*sizeNode // the nodes again, for a walk quicker than a map's
	top   uint64      // the largest size with blocks, unless stale
	stale bool
	spare []*sizeNode
	slab  slab[sizeNode]
}

// ref returns the node of size, made on first use, for a new bucket.
func (t *sizeTable) ref(size uint64) *sizeNode {
	n := t.nodes[size]
	if n == nil {
		if t.nodes == nil {
			t.nodes = map[uint64]*sizeNode{}
		}
		if k := len(t.spare); k > 0 {
			n = t.spare[k-1]
			t.spare = t.spare[:k-1]
			*n = sizeNode{size: size}
		} else {
			n = t.slab.get()
			n.size = size
		}
		t.nodes[size] = n
		n.at = len(t.all)
		t.all = append(t.all, n)
	}
	n.refs++
	return n
}

// unref drops a swept bucket's reference.
func (t *sizeTable) unref(n *sizeNode) {
	if n.refs--; n.refs == 0 {
		delete(t.nodes, n.size)
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

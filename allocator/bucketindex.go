package allocator

import "math/bits"

// bucketIndex is the free set's ordered index: its buckets by (stream,
// size), in PyTorch's order. It replaces a google/btree whose lower-bound
// walk (a generic comparison through two pointers per step, then a skip
// over the empty buckets one by one) was an eighth of a replay (issue 19).
//
// It is a B+-tree of two levels: sorted leaves of up to leafCap keys, and
// the first key of each leaf in a sorted slice. A search is two binary
// searches over plain integer pairs. Each leaf has a bitmap of its
// non-empty buckets: a bucket that empties stays where it is, so the
// cache hit's usual cycle (the last block of a size taken, a block of that
// size given back) flips one bit and moves nothing, and a search skips
// empty buckets 64 at a time with one bit scan. A bucket knows its leaf
// and slot, which change only when a new key is inserted into its leaf or
// the index is rebuilt. The free set rebuilds it without the empty buckets
// when they outnumber the rest (sweep).
//
// Two levels are enough for the keys a pool holds: a training job's
// distinct free sizes number in the hundreds, and 100,000 streams of one
// size each cost one move of a 40 KB top slice per leaf split.
type bucketIndex struct {
	leaves []*leaf
	firsts []bkey // firsts[i] == leaves[i].keys[0]
	n      int    // keys, empty buckets' included
	spare  []*leaf
	// retired is the leaves slice before the last rebuild, whose array
	// the next rebuild fills, so that rebuilds do not make slices.
	retired []*leaf
	// ver changes whenever a key moves (an insert, a rebuild); marking
	// buckets empty or not moves none.
	ver uint64
	// seen remembers where searches for keys that have no bucket ended:
	// best fit asks for the same sizes over and over, and between two
	// inserts the answer's place does not change. 256 entries, because a
	// training step asks for about a hundred distinct sizes and 64 entries
	// missed half the time (8 KB, made on a pool's first search: most
	// allocators leave some pools unused). Two-way: a key's two places
	// share a cache line, the last used first. Direct-mapped, 27% of the
	// replay benchmark's searches (87 sizes) found their place taken by
	// another size and searched the index again; two-way, 18% (issue 19).
	seen *[seenSets][2]seenPos
}

const (
	seenBits = 7
	seenSets = 1 << seenBits
)

// seenPos is 32 bytes, so that a set of two is one cache line: the table
// is a multiple of a page, and so aligned. ver is the index's ver's low 32
// bits; the table is cleared when they wrap around (bump).
type seenPos struct {
	k    bkey
	leaf *leaf
	slot int32
	ver  uint32
}

// bkey is a bucket's key: PyTorch's set order is stream first, then size.
type bkey struct {
	stream Stream
	size   uint64
}

func (k bkey) less(o bkey) bool {
	return k.stream < o.stream || (k.stream == o.stream && k.size < o.size)
}

const leafCap = 64

type leaf struct {
	n          int
	full       uint64 // bit i: vals[i] holds blocks
	prev, next *leaf  // neighbours in key order
	keys       [leafCap]bkey
	vals       [leafCap]*bucket
}

// lowerIn returns the first index of keys[:n] whose key is not below k.
func (l *leaf) lowerIn(k bkey) int {
	lo, hi := 0, l.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.keys[m].less(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// locate returns the leaf where k is or belongs (the last whose first key
// is not above k, or the first), the index in it of the first key not
// below k (possibly the leaf's length), and whether that key is k. With
// no leaves it returns (0, 0, false).
func (x *bucketIndex) locate(k bkey) (li, i int, found bool) {
	nl := len(x.leaves)
	if nl == 0 {
		return 0, 0, false
	}
	lo, hi := 0, nl
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.less(x.firsts[m]) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	li = max(lo-1, 0)
	l := x.leaves[li]
	i = l.lowerIn(k)
	return li, i, i < l.n && l.keys[i] == k
}

// fullFrom returns the first non-empty bucket at or after slot i of l
// (nil: past the end), or nil.
func fullFrom(l *leaf, i int) *bucket {
	if l == nil {
		return nil
	}
	// The shifts are masked to the word (i < leafCap, the word's width),
	// so the compiler does not add the cases of a shift by 64 or more.
	if m := l.full >> uint(i&63) << uint(i&63); i < leafCap && m != 0 {
		return l.vals[bits.TrailingZeros64(m)]
	}
	for l = l.next; l != nil; l = l.next {
		if l.full != 0 {
			return l.vals[bits.TrailingZeros64(l.full)]
		}
	}
	return nil
}

// fullBefore returns the last non-empty bucket before slot i of l, or nil.
func fullBefore(l *leaf, i int) *bucket {
	if m := l.full & (uint64(1)<<uint(i) - 1); m != 0 {
		return l.vals[63-bits.LeadingZeros64(m)]
	}
	for l = l.prev; l != nil; l = l.prev {
		if l.full != 0 {
			return l.vals[63-bits.LeadingZeros64(l.full)]
		}
	}
	return nil
}

// first is the lowest block of the first non-empty bucket whose key is
// not below k (best fit's answer from the buckets), or nil.
// Where the search for k ended is remembered (seen); where that was
// forgotten, a bucket of k itself, found in tab, is the place without a
// search.
func (x *bucketIndex) first(k bkey, tab *bucketTable) *Block {
	if len(x.leaves) == 0 {
		return nil
	}
	if x.seen == nil {
		x.seen = new([seenSets][2]seenPos)
	}
	set := &x.seen[seenSet(k)]
	p, ver := &set[0], uint32(x.ver)
	if p.ver != ver || p.k != k || p.leaf == nil {
		x.seenMiss(set, k, tab)
	}
	if bk := fullFrom(p.leaf, int(p.slot)); bk != nil {
		return bk.blocks[len(bk.blocks)-1].b
	}
	return nil
}

// seenSet is k's set in seen.
func seenSet(k bkey) uint64 {
	return ((k.size>>9 ^ uint64(k.stream)*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9) >> (64 - seenBits)
}

// seenMiss puts k's place first in its set: from the set's second entry,
// or else found in tab or by a search. The first entry moves to the
// second.
func (x *bucketIndex) seenMiss(set *[2]seenPos, k bkey, tab *bucketTable) {
	ver := uint32(x.ver)
	if q := set[1]; q.ver == ver && q.k == k && q.leaf != nil {
		set[1], set[0] = set[0], q
		return
	}
	set[1] = set[0]
	p := &set[0]
	if e := tab.get(k); e != nil {
		p.leaf, p.slot = e.leaf, e.slot
	} else {
		li, i, _ := x.locate(k)
		p.leaf, p.slot = x.leaves[li], int32(i)
	}
	p.k, p.ver = k, ver
}

// bump changes ver: every place seen remembers is forgotten. When the low
// 32 bits that seen keeps wrap around, seen is cleared, so that a place
// from 2^32 changes ago is not taken for current.
func (x *bucketIndex) bump() {
	x.ver++
	if uint32(x.ver) == 0 && x.seen != nil {
		*x.seen = [seenSets][2]seenPos{}
	}
}

// before is the last non-empty bucket before key k, or nil.
func (x *bucketIndex) before(k bkey) *bucket {
	li, i, _ := x.locate(k)
	if li >= len(x.leaves) {
		return nil
	}
	return fullBefore(x.leaves[li], i)
}

// last is the last non-empty bucket, or nil.
func (x *bucketIndex) last() *bucket {
	if len(x.leaves) == 0 {
		return nil
	}
	return fullBefore(x.leaves[len(x.leaves)-1], leafCap)
}

// setFull marks bk as holding blocks, or not.
func (bk *bucket) setFull(on bool) {
	if on {
		bk.leaf.full |= 1 << uint(bk.slot)
	} else {
		bk.leaf.full &^= 1 << uint(bk.slot)
	}
}

// insertAt puts the empty bucket v under k at the position locate
// returned for k, which must not be in the index.
func (x *bucketIndex) insertAt(li, i int, k bkey, v *bucket) {
	x.n++
	x.bump()
	if len(x.leaves) == 0 {
		l := x.newLeaf()
		x.leaves = append(x.leaves, l)
		x.firsts = append(x.firsts, k)
	}
	l := x.leaves[li]
	if l.n == leafCap {
		const half = leafCap / 2
		r := x.newLeaf()
		r.n = copy(r.keys[:], l.keys[half:])
		copy(r.vals[:], l.vals[half:])
		clear(l.vals[half:])
		r.full = l.full >> half
		l.full &= 1<<half - 1
		l.n = half
		r.renumber(0)
		r.prev, r.next = l, l.next
		if l.next != nil {
			l.next.prev = r
		}
		l.next = r
		x.leaves = insertSlot(x.leaves, li+1, r)
		x.firsts = insertSlot(x.firsts, li+1, r.keys[0])
		if i > half {
			li, i, l = li+1, i-half, r
		}
	}
	copy(l.keys[i+1:l.n+1], l.keys[i:l.n])
	copy(l.vals[i+1:l.n+1], l.vals[i:l.n])
	low := uint64(1)<<uint(i) - 1
	l.full = l.full&low | (l.full&^low)<<1
	l.keys[i], l.vals[i] = k, v
	l.n++
	l.renumber(i)
	if i == 0 {
		x.firsts[li] = k
	}
}

// renumber tells the buckets from slot i on where they are.
func (l *leaf) renumber(i int) {
	for j := i; j < l.n; j++ {
		l.vals[j].leaf, l.vals[j].slot = l, int32(j)
	}
}

// rebuild refills the index with the buckets keep says to keep, in order,
// packed into leaves three quarters full; drop is called for the others.
func (x *bucketIndex) rebuild(keep func(*bucket) bool, drop func(*bucket)) {
	old := x.leaves
	x.leaves, x.firsts, x.n = x.retired[:0], x.firsts[:0], 0
	x.bump()
	var cur *leaf
	for _, l := range old {
		for j, bk := range l.vals[:l.n] {
			if !keep(bk) {
				drop(bk)
				continue
			}
			if cur == nil || cur.n == leafCap*3/4 {
				prev := cur
				cur = x.newLeaf()
				cur.prev = prev
				if prev != nil {
					prev.next = cur
				}
				x.leaves = append(x.leaves, cur)
				x.firsts = append(x.firsts, l.keys[j])
			}
			cur.keys[cur.n], cur.vals[cur.n] = l.keys[j], bk
			if l.full&(1<<uint(j)) != 0 {
				cur.full |= 1 << uint(cur.n)
			}
			bk.leaf, bk.slot = cur, int32(cur.n)
			cur.n++
			x.n++
		}
	}
	for _, l := range old {
		x.recycle(l)
	}
	clear(old)
	x.retired = old
}

func (x *bucketIndex) newLeaf() *leaf {
	if n := len(x.spare); n > 0 {
		l := x.spare[n-1]
		x.spare = x.spare[:n-1]
		return l
	}
	return new(leaf)
}

func (x *bucketIndex) recycle(l *leaf) {
	clear(l.vals[:l.n])
	l.n, l.full, l.prev, l.next = 0, 0, nil, nil
	if len(x.spare) < 64 {
		x.spare = append(x.spare, l)
	}
}

func insertSlot[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

package allocator

import "github.com/google/btree"

// freeSet is a pool's set of free mapped blocks, in PyTorch's order
// (stream, size, address), as BlockPool.blocks is.
//
// Training loops ask for the same sizes over and over, so the set is built
// for the exact-size hit: a hash map from (stream, size) to a bucket holding
// the free blocks of that size sorted by address, highest first, so that the
// lowest address, which best fit takes, is at the end of the slice. The
// ordered walks (lower bound when no block of the exact size is free,
// next/previous in set order, whole-pool iteration) go through a B-tree over
// the bucket keys. Buckets that empty stay in both indexes so that a block
// taken and given back touches only the map; they are swept when they
// outnumber the live ones.
type freeSet struct {
	buckets map[uint64]*bucket // by packed key, see packKey
	index   *btree.BTreeG[*bucket]
	pivot   bucket // search key for the B-tree, kept here to avoid allocating
	empty   int    // buckets with no blocks
	n       int    // blocks in the set

	// Streams are numbered densely so that (stream, size) packs into one
	// word, which Go's maps hash several times faster than a struct.
	streamIDs  map[Stream]uint64
	lastStream Stream
	lastID     uint64

	spare []*bucket // swept buckets, reused with their slices

	// bytes sums the blocks' sizes, and sizes counts, per size, the
	// buckets that hold blocks of it (over every stream): FreeSummary reads
	// the total, and the largest from the distinct sizes, rather than
	// walking one bucket per (stream, size), which is as many as there are
	// streams.
	bytes uint64
	sizes map[uint64]*sizeNode
	// spareSizes holds dropped size nodes for reuse: a size that empties
	// and comes back (every step of a training loop) then costs no heap
	// allocation.
	spareSizes []*sizeNode
}

// sizeNode counts the buckets of one size: refs those in the set, nonEmpty
// those holding blocks.
type sizeNode struct {
	size           uint64
	refs, nonEmpty int
}

// sizeNode returns the node of size, made on first use; the caller holds
// a reference.
func (s *freeSet) sizeNode(size uint64) *sizeNode {
	n := s.sizes[size]
	if n == nil {
		if k := len(s.spareSizes); k > 0 {
			n = s.spareSizes[k-1]
			s.spareSizes = s.spareSizes[:k-1]
			*n = sizeNode{size: size}
		} else {
			n = &sizeNode{size: size}
		}
		s.sizes[size] = n
	}
	n.refs++
	return n
}

// largest is the size of the largest block in the set, or 0: a walk over
// the distinct sizes, which are few (the stream does not multiply them).
func (s *freeSet) largest() uint64 {
	var l uint64
	for size, n := range s.sizes {
		if n.nonEmpty > 0 {
			l = max(l, size)
		}
	}
	return l
}

type sizeKey struct {
	stream Stream
	size   uint64
}

func (k sizeKey) less(o sizeKey) bool {
	if k.stream != o.stream {
		return k.stream < o.stream
	}
	return k.size < o.size
}

type bucket struct {
	key    sizeKey
	packed uint64
	blocks []*Block // descending address: the lowest is last
	dead   bool     // swept out of the set; blocks may still name it as a hint
	sz     *sizeNode
}

func bucketLess(a, b *bucket) bool { return a.key.less(b.key) }

func newFreeSet() freeSet {
	return freeSet{
		buckets:   make(map[uint64]*bucket),
		index:     btree.NewWithFreeListG(16, bucketLess, btree.NewFreeListG[*bucket](64)),
		streamIDs: map[Stream]uint64{0: 0},
		sizes:     map[uint64]*sizeNode{},
	}
}

// packKey packs (stream, size) into one word: the stream's number above bit
// 41 and size/512 below, which holds every block size under 1 PiB (block
// sizes are multiples of 512; CheckInvariants verifies it).
func (s *freeSet) packKey(stream Stream, size uint64) uint64 {
	if stream != s.lastStream {
		id, ok := s.streamIDs[stream]
		if !ok {
			id = uint64(len(s.streamIDs))
			s.streamIDs[stream] = id
		}
		s.lastStream, s.lastID = stream, id
	}
	return s.lastID<<41 | size>>9
}

// bucketFor returns the live bucket for b's current size, using the bucket b
// was last in as a hint: a block freed at the size it was taken at needs no
// lookup.
func (s *freeSet) bucketFor(b *Block) *bucket {
	if h := b.bucket; h != nil && !h.dead && h.key.size == b.size && h.key.stream == b.stream {
		return h
	}
	return s.buckets[s.packKey(b.stream, b.size)]
}

func (s *freeSet) len() int { return s.n }

// search returns the position of addr in a descending slice: the first index
// whose address is not above addr.
func search(bs []*Block, addr uint64) int {
	lo, hi := 0, len(bs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[m].addr > addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (s *freeSet) insert(b *Block) {
	bk := s.bucketFor(b)
	if bk == nil {
		if n := len(s.spare); n > 0 {
			bk = s.spare[n-1]
			s.spare = s.spare[:n-1]
		} else {
			bk = &bucket{}
		}
		bk.key, bk.packed, bk.dead = sizeKey{b.stream, b.size}, s.packKey(b.stream, b.size), false
		bk.sz = s.sizeNode(b.size)
		s.buckets[bk.packed] = bk
		s.index.ReplaceOrInsert(bk)
		bk.sz.nonEmpty++
	} else if len(bk.blocks) == 0 {
		s.empty--
		bk.sz.nonEmpty++
	}
	s.bytes += b.size
	// Freed blocks are mostly at low addresses, near the end: a short move.
	i := search(bk.blocks, b.addr)
	bk.blocks = append(bk.blocks, nil)
	copy(bk.blocks[i+1:], bk.blocks[i:])
	bk.blocks[i] = b
	b.bucket = bk
	s.n++
}

// remove deletes b, which must be in the set with its current size.
func (s *freeSet) remove(b *Block) {
	bk := b.bucket
	i := search(bk.blocks, b.addr)
	if i == len(bk.blocks) || bk.blocks[i] != b {
		panic("allocator: free set does not hold the block it is asked to remove")
	}
	copy(bk.blocks[i:], bk.blocks[i+1:])
	bk.blocks[len(bk.blocks)-1] = nil
	bk.blocks = bk.blocks[:len(bk.blocks)-1]
	s.n--
	s.bytes -= b.size
	if len(bk.blocks) == 0 {
		bk.sz.nonEmpty--
		s.empty++
		if s.empty > 64 && s.empty > len(s.buckets)/2 {
			s.sweep()
		}
	}
}

func (s *freeSet) sweep() {
	for k, bk := range s.buckets {
		if len(bk.blocks) == 0 {
			delete(s.buckets, k)
			s.index.Delete(bk)
			bk.dead = true
			if bk.sz.refs--; bk.sz.refs == 0 {
				delete(s.sizes, bk.sz.size)
				if len(s.spareSizes) < 1024 {
					s.spareSizes = append(s.spareSizes, bk.sz)
				}
			}
			bk.sz = nil
			if len(s.spare) < 1024 {
				s.spare = append(s.spare, bk)
			}
		}
	}
	s.empty = 0
}

// lowerBound returns the first block at or after (stream, size, 0) in set
// order, whatever its stream, or nil.
func (s *freeSet) lowerBound(stream Stream, size uint64) *Block {
	if bk := s.buckets[s.packKey(stream, size)]; bk != nil && len(bk.blocks) > 0 {
		return bk.blocks[len(bk.blocks)-1]
	}
	return s.firstFrom(sizeKey{stream, size}, false)
}

// firstFrom returns the lowest-address block of the first non-empty bucket
// whose key is at or after k (strictly after with strict).
func (s *freeSet) firstFrom(k sizeKey, strict bool) *Block {
	var found *Block
	s.pivot.key = k
	s.index.AscendGreaterOrEqual(&s.pivot, func(bk *bucket) bool {
		if len(bk.blocks) == 0 || (strict && bk.key == k) {
			return true
		}
		found = bk.blocks[len(bk.blocks)-1]
		return false
	})
	return found
}

// lastBefore returns the highest-address block of the last non-empty bucket
// whose key is before k.
func (s *freeSet) lastBefore(k sizeKey) *Block {
	var found *Block
	s.pivot.key = k
	s.index.DescendLessOrEqual(&s.pivot, func(bk *bucket) bool {
		if len(bk.blocks) == 0 || bk.key == k {
			return true
		}
		found = bk.blocks[0]
		return false
	})
	return found
}

// next returns the block after b in set order, or nil. b must be in the set.
func (s *freeSet) next(b *Block) *Block {
	bk := b.bucket
	if i := search(bk.blocks, b.addr); i > 0 {
		return bk.blocks[i-1]
	}
	return s.firstFrom(bk.key, true)
}

// prev returns the block before b in set order, or nil. b must be in the set.
func (s *freeSet) prev(b *Block) *Block {
	bk := b.bucket
	if i := search(bk.blocks, b.addr); i+1 < len(bk.blocks) {
		return bk.blocks[i+1]
	}
	return s.lastBefore(bk.key)
}

// last returns the final block in set order, or nil.
func (s *freeSet) last() *Block {
	var found *Block
	s.index.Descend(func(bk *bucket) bool {
		if len(bk.blocks) == 0 {
			return true
		}
		found = bk.blocks[0]
		return false
	})
	return found
}

// appendAll appends every block in set order.
func (s *freeSet) appendAll(dst []*Block) []*Block {
	s.index.Ascend(func(bk *bucket) bool {
		for i := len(bk.blocks) - 1; i >= 0; i-- {
			dst = append(dst, bk.blocks[i])
		}
		return true
	})
	return dst
}

// contains reports whether b is in the set (for invariant checks).
func (s *freeSet) contains(b *Block) bool {
	bk := s.buckets[s.packKey(b.stream, b.size)]
	if bk == nil {
		return false
	}
	i := search(bk.blocks, b.addr)
	return i < len(bk.blocks) && bk.blocks[i] == b
}

// unmappedSet holds a pool's unmapped expandable ranges ordered by (stream,
// address), as BlockPool.unmapped does. There are few of them (about one per
// expandable segment), so a sorted slice is enough.
type unmappedSet struct {
	blocks []*Block
}

func unmappedLess(a *Block, stream Stream, addr uint64) bool {
	if a.stream != stream {
		return a.stream < stream
	}
	return a.addr < addr
}

func (u *unmappedSet) lowerBound(stream Stream, addr uint64) int {
	lo, hi := 0, len(u.blocks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if unmappedLess(u.blocks[m], stream, addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (u *unmappedSet) insert(b *Block) {
	i := u.lowerBound(b.stream, b.addr)
	u.blocks = append(u.blocks, nil)
	copy(u.blocks[i+1:], u.blocks[i:])
	u.blocks[i] = b
}

func (u *unmappedSet) remove(b *Block) {
	i := u.lowerBound(b.stream, b.addr)
	if i == len(u.blocks) || u.blocks[i] != b {
		panic("allocator: unmapped set does not hold the block it is asked to remove")
	}
	copy(u.blocks[i:], u.blocks[i+1:])
	u.blocks[len(u.blocks)-1] = nil
	u.blocks = u.blocks[:len(u.blocks)-1]
}

func (u *unmappedSet) contains(b *Block) bool {
	i := u.lowerBound(b.stream, b.addr)
	return i < len(u.blocks) && u.blocks[i] == b
}

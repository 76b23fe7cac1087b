package allocator

// freeSet is a pool's set of free mapped blocks, in PyTorch's order
// (stream, size, address), as BlockPool.blocks is.
//
// The blocks of one (stream, size) sit in a bucket sorted by address,
// highest first, so that the lowest address, which best fit takes, is at
// the end of the slice. The buckets are in an ordered index
// (bucketindex.go) that marks which hold blocks: best fit's lower bound is
// one search there, whether or not a block of the exact size is free (and
// mostly none: the index remembers where the searches for a key ended), and
// ordered walks (next/previous in set order, the whole pool) step through
// it. A bucket that empties stays in the index, so that training loops,
// which free and take the same sizes over and over, mostly flip a bit;
// the empty ones are swept out when they outnumber the others. A block
// remembers its bucket, so a block freed at the size it was taken at goes
// back without a search.
//
// The blocks inserted last wait outside their buckets: the newest in hot,
// up to olderCap before it in older. Most leave again before they would
// have been worth a bucket: the cached pair's usual cycle takes the newest
// straight back out. A malloc that splits a block leaves the remainder in
// hot and the free that merges it back removes it from there; a block
// freed whole is there for the next malloc of its size. Each of those was
// a bucket's insert and remove (the table's probe, the bitmap's and the
// size counts' updates, and for a split remainder's new size a new bucket
// in the index), over a third of the small pool's split+merge pair, and
// in the trial model half the inserts reached a bucket with hot alone and
// an eighth with older as well (issue 19). The hot blocks are in the set
// in every respect but their buckets, and every query answers as if they
// were in them: lower bound, last, largest, contains and the free bytes
// look at them beside the buckets; the ordered walks (next, prev,
// appendAll), which only the rarer paths take (expandable segments' best
// fit, releases, garbage collection), first put them in their buckets
// (settle). hot is a field of its own, not older's last place, so that
// the pair's insert and remove are a pointer test and store and inline.
// older is a ring, and each of its blocks knows its place there
// (Block.older): the oldest leaves and the newest joins without moving the
// others, and a removal finds its block without a scan. Shifting older
// down was a pointer copy on every insert that reached it, which pays
// the collector's write barriers while it marks (a quarter of the trial
// model's run); a removal moves the newer blocks behind it up, mostly none.
type freeSet struct {
	hot    *Block            // the newest block outside its bucket, or nil
	older  [olderRing]*Block // the ones before it: a ring, oldest at ohead
	ohead  int
	nolder int
	cold   bool // tests: no hot blocks, every insert goes to its bucket
	idx    bucketIndex
	tab    bucketTable // the index's buckets by exact key
	n      int         // blocks in buckets: the set's, less the hot ones
	bytes  uint64      // their sizes' sum (freeBytes adds the hot blocks')
	empty  int         // empty buckets in the index
	sizes  sizeTable
	spare  []*bucket // swept buckets, reused with their slices
	bks    slab[bucket]
	ents   []bentry // the rest of the chunk buckets' slices are carved from
}

type bucket struct {
	key    bkey
	blocks []bentry // descending address: the lowest is last
	leaf   *leaf    // where the index holds it
	sz     *sizeNode
	slot   int32
	live   bool // in the index; a block's hint to a bucket that is not, or is another key's, is stale
	// inline holds blocks until there are more than fit: most sizes have
	// one or two free blocks at a time, so most buckets never make a
	// slice of their own. A bucket is never copied (it lives in a slab).
	inline [2]bentry
}

// bentry is a block in its bucket, with its address beside it: placing a
// block, or taking one that is not the lowest, searches the bucket by
// address, and reading the addresses from the blocks missed the cache on
// nearly every one (the replay benchmark's buckets hold about five blocks,
// each a cache line of its own; issue 19).
type bentry struct {
	addr uint64
	b    *Block
}

func (a *Allocator) newFreeSet() freeSet {
	s := freeSet{cold: a.coldFree}
	s.bks.pool, s.sizes.slab.pool = &bucketChunks, &sizeNodeChunks
	return s
}

// The chunks of buckets and size nodes of discarded allocators (slab.go).
var (
	bucketChunks   chunkPool[bucket]
	sizeNodeChunks chunkPool[sizeNode]
)

// discard hands the set's chunks to the allocators made after its own,
// which was discarded (Allocator.Discard).
func (s *freeSet) discard() {
	s.bks.discard()
	s.sizes.slab.discard()
}

// olderCap is how many blocks wait outside their buckets besides the
// newest. Best fit looks at each of them, so more cost every malloc; in
// the trial model 4 in all left 23% of the inserts to reach a bucket, 8
// left 12%, 16 left 9%.
const olderCap = 7

// older is a ring of olderRing places, so that the oldest leaves and the
// newest joins without moving the others (a pointer copy, which pays the
// collector's write barriers while it marks); olderRing exceeds olderCap,
// so the place the newest joins at is free.
const (
	olderRing = 8
	olderMask = olderRing - 1
)

// olderAt returns the i-th oldest of older.
func (s *freeSet) olderAt(i int) *Block { return s.older[(s.ohead+i)&olderMask] }

func (s *freeSet) len() int {
	n := s.n + s.nolder
	if s.hot != nil {
		n++
	}
	return n
}

// search returns the position of addr in a descending slice: the first index
// whose address is not above addr.
func search(bs []bentry, addr uint64) int {
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

// insert adds b. It is small enough to inline: the cached pair's inserts
// find hot empty (the block before left again) and only store b.
func (s *freeSet) insert(b *Block) {
	if s.hot == nil && !s.cold {
		s.hot = b
		return
	}
	s.insertPlacing(b)
}

// insertPlacing is insert, not inlined: b takes an empty hot place, or hot
// moves to older, whose oldest block goes to its bucket if older is full.
// In a cold set b goes to its bucket.
func (s *freeSet) insertPlacing(b *Block) {
	if s.cold {
		s.place(b)
		return
	}
	if s.hot == nil {
		s.hot = b
		return
	}
	if s.nolder == olderCap {
		o := s.older[s.ohead]
		s.older[s.ohead] = nil
		o.older = 0
		s.ohead = (s.ohead + 1) & olderMask
		s.nolder--
		s.place(o)
	}
	i := (s.ohead + s.nolder) & olderMask
	s.older[i] = s.hot
	s.hot.older = uint8(i + 1)
	s.nolder++
	s.hot = b
}

// settle puts the hot blocks in their buckets.
func (s *freeSet) settle() {
	for i, h := range s.older {
		if h != nil {
			s.older[i] = nil
			h.older = 0
			s.place(h)
		}
	}
	s.ohead, s.nolder = 0, 0
	if h := s.hot; h != nil {
		s.hot = nil
		s.place(h)
	}
}

// before says whether a comes before b in set order.
func before(a, b *Block) bool {
	if a.stream != b.stream {
		return a.stream < b.stream
	}
	if a.size != b.size {
		return a.size < b.size
	}
	return a.addr < b.addr
}

// place puts b in its bucket.
func (s *freeSet) place(b *Block) {
	s.n++
	s.bytes += b.size
	k := bkey{b.stream, b.size}
	bk := b.bucket
	if bk == nil || !bk.live || bk.key != k {
		if bk = s.tab.get(k); bk == nil {
			li, i, _ := s.idx.locate(k)
			bk = s.newBucket(k)
			bk.sz = s.sizes.ref(k.size)
			s.idx.insertAt(li, i, k, bk)
			s.tab.add(bk)
			s.empty++
		}
	}
	if len(bk.blocks) == 0 {
		bk.setFull(true)
		s.empty--
		s.sizes.filled(bk.sz)
	}
	s.room(bk)
	// Freed blocks are mostly at low addresses, near the end: a short move.
	e := bentry{b.addr, b}
	if n := len(bk.blocks); n == 0 || bk.blocks[n-1].addr > b.addr {
		bk.blocks = append(bk.blocks, e)
	} else {
		i := search(bk.blocks, b.addr)
		bk.blocks = append(bk.blocks, bentry{})
		copy(bk.blocks[i+1:], bk.blocks[i:])
		bk.blocks[i] = e
	}
	b.bucket = bk
}

// room makes sure bk has room for one more block. A bucket that outgrows
// its slice gets one twice as long, carved from the free set's chunk
// rather than made by append: a process growing to its peak grows its
// buckets many times, and each would be a heap object. The old slice is
// left unused (in its chunk, or the bucket's inline array); a bucket keeps
// its slice for as long as it lives, and swept buckets are reused with
// theirs, so the slices stop growing at the pool's peak.
func (s *freeSet) room(bk *bucket) {
	n := len(bk.blocks)
	if n < cap(bk.blocks) {
		return
	}
	c := 2 * cap(bk.blocks)
	if len(s.ents) < c {
		s.ents = make([]bentry, max(c, 128)) // 2 KiB, as the chunks of pointers were
	}
	grown := s.ents[:n:c]
	s.ents = s.ents[c:]
	copy(grown, bk.blocks)
	clear(bk.blocks)
	bk.blocks = grown
}

func (s *freeSet) newBucket(k bkey) *bucket {
	var bk *bucket
	if n := len(s.spare); n > 0 {
		bk = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		bk = s.bks.get()
		bk.blocks = bk.inline[:0]
	}
	bk.key, bk.live = k, true
	return bk
}

// remove deletes b, which must be in the set with its current size. It
// inlines: the cached pair removes the newest block, in hot.
func (s *freeSet) remove(b *Block) {
	if b == s.hot {
		s.hot = nil
		return
	}
	s.removeElsewhere(b)
}

// removeElsewhere takes b out of older or of its bucket. b knows its place
// in older, so that a removal does not look for it there; the newer ones
// move up behind it, to keep older's order. Most removals take the newest,
// which moves none.
func (s *freeSet) removeElsewhere(b *Block) {
	if b.older == 0 {
		s.unplace(b)
		return
	}
	i := int(b.older) - 1
	b.older = 0
	last := (s.ohead + s.nolder - 1) & olderMask
	for i != last {
		j := (i + 1) & olderMask
		o := s.older[j]
		s.older[i] = o
		o.older = uint8(i + 1)
		i = j
	}
	s.older[last] = nil
	s.nolder--
}

// unplace takes b out of its bucket.
func (s *freeSet) unplace(b *Block) {
	s.bytes -= b.size
	bk := b.bucket
	n := len(bk.blocks)
	i := n - 1 // best fit takes the lowest address: the last
	if n == 0 || bk.blocks[i].b != b {
		i = search(bk.blocks, b.addr)
		if !bk.live || i == n || bk.blocks[i].b != b {
			panic("allocator: free set does not hold the block it is asked to remove")
		}
		copy(bk.blocks[i:], bk.blocks[i+1:])
	}
	bk.blocks[n-1] = bentry{}
	bk.blocks = bk.blocks[:n-1]
	s.n--
	if n == 1 {
		bk.setFull(false)
		s.sizes.emptied(bk.sz)
		s.empty++
		if s.empty > 64 && s.empty > s.idx.n/2 {
			s.sweep()
		}
	}
}

// sweep rebuilds the index without its empty buckets.
func (s *freeSet) sweep() {
	s.idx.rebuild(func(bk *bucket) bool { return len(bk.blocks) > 0 }, func(bk *bucket) {
		s.sizes.unref(bk.sz)
		bk.live, bk.leaf, bk.sz = false, nil, nil
		if len(s.spare) < 1024 {
			s.spare = append(s.spare, bk)
		}
	})
	s.empty = 0
	s.tab.reset(s.idx.n)
	for _, l := range s.idx.leaves {
		for _, bk := range l.vals[:l.n] {
			s.tab.add(bk)
		}
	}
}

// freeBytes is the sum of the blocks' sizes.
func (s *freeSet) freeBytes() uint64 {
	total := s.bytes
	if s.hot != nil {
		total += s.hot.size
	}
	for i := range s.nolder {
		total += s.olderAt(i).size
	}
	return total
}

// largest is the size of the largest block in the set, or 0.
func (s *freeSet) largest() uint64 {
	l := s.sizes.largest()
	if s.hot != nil {
		l = max(l, s.hot.size)
	}
	for i := range s.nolder {
		l = max(l, s.olderAt(i).size)
	}
	return l
}

// lowerBound returns the first block at or after (stream, size, 0) in set
// order, whatever its stream, or nil.
func (s *freeSet) lowerBound(stream Stream, size uint64) *Block {
	var h *Block // the first hot block at or after the key
	if c := s.hot; c != nil && (c.stream > stream || c.stream == stream && c.size >= size) {
		h = c
	}
	// older's eight places one after the other, written out: the least
	// block at or after the key is the same in any order (no two free
	// blocks share an address), and the ring's free places are nil. A
	// loop over the ring from its start reloaded the start and the count
	// and masked the position on every place: 14 instructions a place,
	// seven places on every malloc (issue 19); a loop over the eight
	// places with the nil test costs as much in its own counting.
	o := &s.older
	h = olderPick(h, o[0], stream, size)
	h = olderPick(h, o[1], stream, size)
	h = olderPick(h, o[2], stream, size)
	h = olderPick(h, o[3], stream, size)
	h = olderPick(h, o[4], stream, size)
	h = olderPick(h, o[5], stream, size)
	h = olderPick(h, o[6], stream, size)
	h = olderPick(h, o[7], stream, size)
	if h == nil {
		return s.bucketLowerBound(stream, size)
	}
	if h.stream == stream && h.size == size {
		// The hot block fits exactly: only a block of its own bucket, at a
		// lower address, can come before it. This is a training loop's
		// malloc after the free of a block of its size.
		if e := s.tab.get(bkey{stream, size}); e != nil && len(e.blocks) > 0 {
			if b := e.blocks[len(e.blocks)-1]; b.addr < h.addr {
				return b.b
			}
		}
		return h
	}
	if b := s.bucketLowerBound(stream, size); b != nil && before(b, h) {
		return b
	}
	return h
}

// olderPick is lowerBound's step over one place of older: c, when it is a
// block at or after (stream, size) that comes before h (or h is nil), else h.
func olderPick(h, c *Block, stream Stream, size uint64) *Block {
	if c != nil && (c.stream > stream || c.stream == stream && c.size >= size) && (h == nil || before(c, h)) {
		return c
	}
	return h
}

// bucketLowerBound is lowerBound over the buckets, without the hot blocks.
// It inlines (into lowerBound, issue 19): the index's first returns the
// block, not its bucket.
func (s *freeSet) bucketLowerBound(stream Stream, size uint64) *Block {
	if s.n == 0 {
		return nil
	}
	return s.idx.first(bkey{stream, size}, &s.tab)
}

// next returns the block after b in set order, or nil. b must be in the set.
func (s *freeSet) next(b *Block) *Block {
	s.settle()
	bk := b.bucket
	if i := search(bk.blocks, b.addr); i > 0 {
		return bk.blocks[i-1].b
	}
	if bk = fullFrom(bk.leaf, int(bk.slot)+1); bk == nil {
		return nil
	}
	return bk.blocks[len(bk.blocks)-1].b
}

// prev returns the block before b in set order, or nil. b must be in the set.
func (s *freeSet) prev(b *Block) *Block {
	s.settle()
	bk := b.bucket
	if i := search(bk.blocks, b.addr); i+1 < len(bk.blocks) {
		return bk.blocks[i+1].b
	}
	if bk = fullBefore(bk.leaf, int(bk.slot)); bk == nil {
		return nil
	}
	return bk.blocks[0].b
}

// last returns the final block in set order, or nil.
func (s *freeSet) last() *Block {
	var b *Block
	if bk := s.idx.last(); bk != nil {
		b = bk.blocks[0].b
	}
	if h := s.hot; h != nil && (b == nil || before(b, h)) {
		b = h
	}
	for i := range s.nolder {
		if h := s.olderAt(i); b == nil || before(b, h) {
			b = h
		}
	}
	return b
}

// appendAll appends every block in set order.
func (s *freeSet) appendAll(dst []*Block) []*Block {
	s.settle()
	for _, l := range s.idx.leaves {
		for _, bk := range l.vals[:l.n] {
			for i := len(bk.blocks) - 1; i >= 0; i-- {
				dst = append(dst, bk.blocks[i].b)
			}
		}
	}
	return dst
}

// contains reports whether b is in the set (for invariant checks).
func (s *freeSet) contains(b *Block) bool {
	if b == s.hot || b.older != 0 && s.older[b.older-1] == b {
		return true
	}
	li, j, found := s.idx.locate(bkey{b.stream, b.size})
	if !found {
		return false
	}
	bk := s.idx.leaves[li].vals[j]
	i := search(bk.blocks, b.addr)
	return i < len(bk.blocks) && bk.blocks[i].b == b
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

package allocator

// Block is a contiguous range [Addr, Addr+Size) of a segment. Malloc hands
// out allocated blocks; the caller gives them back with Free. A *Block is
// valid from Malloc until the Free that returns it: block objects are
// recycled afterwards (slab.go says when), so a stale pointer must not be
// used.
type Block struct {
	// The fields best fit, splitting and merging read come first, in the
	// first of a Block's two cache lines: a Block is 128 bytes
	// (TestBlockIsTwoCacheLines), so the slabs' chunks, which the Go
	// allocator aligns to 64 bytes at least, never split those fields over
	// two lines. At 144 bytes, three blocks in four did, and the chunks
	// were a ninth larger (they are two thirds of what the trial model
	// allocates, and the collector ran a fifteenth more often).
	addr       uint64
	size       uint64
	stream     Stream
	pool       *pool
	seg        *segment
	prev       *Block // neighbours inside the segment, by address
	next       *Block
	allocated  bool
	mapped     bool    // false only for unmapped ranges of expandable segments
	exp        bool    // seg.exp != nil, which never changes for a segment
	older      uint8   // its place in its free set's older ring, plus one; 0 when not there
	eventCount int32   // outstanding record-stream events
	bucket     *bucket // the free-set bucket it is in, or was last in (a hint)
	// The other streams that used it (RecordStream), or nil (never an
	// empty list): a pointer rather than a slice, since few blocks have
	// any, to keep a Block in two cache lines.
	streamUses *[]Stream
	requested  uint64 // the caller's unrounded size; stale once freed, as in PyTorch

	gcCountBase uint64 // pool.getFreeBlocksCallCount when it became free

	// Lifetime (policy_lifetime.go): the epoch it was handed out in, its
	// size class, and whether it was predicted long-lived.
	born     uint32
	lifeLong bool
	class    *lifeClass
	// Stitch (policy_stitch.go): the stitched range that maps this block's
	// pages elsewhere. A lent block is neither free nor the caller's.
	lentTo *segment
	// Plan (policy_plan.go): the block's entry in the plan's log, valid
	// while planGen is the log's generation.
	planIdx int32
	planGen uint32
}

// Addr is the block's device address.
func (b *Block) Addr() uint64 { return b.addr }

// Size is the block's size in bytes, after rounding and splitting.
func (b *Block) Size() uint64 { return b.size }

// RequestedSize is the size the caller asked for.
func (b *Block) RequestedSize() uint64 { return b.requested }

// Stream is the stream the block was allocated on.
func (b *Block) Stream() Stream { return b.stream }

func (b *Block) isSplit() bool { return b.prev != nil || b.next != nil }

// active says whether a block is in use, as PyTorch's stats and snapshot
// count it: allocated, or freed but waiting for other streams' work (its
// events pending). Its uses of other streams (streamUses) need no test:
// RecordStream adds them only to an allocated block, and its free turns
// them into events before anything asks (checkInvariants holds this). The
// test read the Block's second cache line, a miss on a free's neighbours
// in a tenth of the replay benchmark's events (issue 19).
func (b *Block) active() bool {
	return b.allocated || b.eventCount > 0
}

// allocatable says whether a block may be merged into or grown through: not
// active.
func (b *Block) allocatable() bool { return b != nil && !b.active() }

func (b *Block) expandable() bool { return b.exp }

// gcAge is the number of get_free_block calls on its pool since the block
// became free: the clock garbage collection uses.
func (b *Block) gcAge() uint64 { return b.pool.getFreeBlocksCallCount - b.gcCountBase }

// segment is one cudaMalloc result or one expandable reservation.
type segment struct {
	base   uint64
	size   uint64 // cudaMalloc size, or the whole reservation
	stream Stream
	pool   *pool
	head   *Block // the block at base; the chain from it tiles the segment
	exp    *expandableSegment
	stitch *stitchedRange // a range of lent pages (policy_stitch.go), nil otherwise
	index  int            // position in Allocator.segments
}

// newBlock returns a block, reusing one from the recycle list so that
// splitting and merging allocate nothing in steady state, or else a fresh
// one from the allocator's slab (slab.go).
func (a *Allocator) newBlock(addr, size uint64, stream Stream, p *pool, seg *segment) *Block {
	return a.newBlockIn(addr, size, stream, p, seg, seg.exp != nil)
}

// newBlockIn is newBlock where the caller knows whether seg is expandable
// (a split knows it from the block it splits), so that the segment is not
// read.
func (a *Allocator) newBlockIn(addr, size uint64, stream Stream, p *pool, seg *segment, exp bool) *Block {
	var b *Block
	if n := len(a.spare); n > 0 {
		b = a.spare[n-1]
		a.spare = a.spare[:n-1]
	} else {
		b = a.blocks.get()
	}
	// b is zeroed (the slab's, or recycle's), so only the fields that are
	// not zero are stored. Not as one composite literal: the compiler
	// builds that on the stack field by field and copies it in 16-byte
	// words, and each wide load of a just-written narrow store stalls
	// store forwarding; that copy was an eighth of a malloc+free pair.
	b.addr, b.size, b.stream = addr, size, stream
	b.pool, b.seg = p, seg
	b.mapped, b.exp = true, exp
	return b
}

// recycle takes back a block the allocator has dropped; slab.go says when
// that may be. The list has no bound: its blocks sit in the slab's chunks,
// which dropping them would not free.
func (a *Allocator) recycle(b *Block) {
	*b = Block{}
	a.spare = append(a.spare, b)
}

// newSegment returns s in an object from the allocator's slab.
func (a *Allocator) newSegment(s segment) *segment {
	seg := a.segs.get()
	*seg = s
	return seg
}

// splice links b between prev and next (either may be nil) and keeps the
// segment's head current.
func splice(b, prev, next *Block) {
	b.prev = prev
	b.next = next
	if prev != nil {
		prev.next = b
	} else {
		b.seg.head = b
	}
	if next != nil {
		next.prev = b
	}
}

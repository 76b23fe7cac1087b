package allocator

import "sync"

// Blocks, segments and the free set's nodes come from slabs: chunks of
// objects that one allocator (or one free set) carves up in order, so that
// a process growing to its peak makes a handful of heap allocations, not
// one per block (issue 19: four fresh processes of the trial model made
// about 10,000 objects a run, one per block and free-set node they ever
// held at once, and the garbage collector paced the whole PAR sweep).
//
// A slab never frees or moves an object: a chunk lives as long as anything
// points into it, exactly as a single object would. So the slab changes
// only where a fresh object comes from; when an object is reused is
// decided, as before, by the free lists beside it (Allocator.spare,
// freeSet.spare, sizeTable.spare, bucketIndex.spare), and the rule for
// those is:
//
// An object is reused only after the allocator itself has dropped it, and
// only when nobody outside the allocator may still rightly hold it. A
// Block is recycled only when it is free (its Free done and its events
// completed) and leaves its segment's chain: merged into a neighbour
// (tryMerge), released with its segment (releaseBlock,
// releaseExpandableSegment), or, for a stitched range's one block, when
// the range is taken apart at its free_completed (unstitch). An allocated
// block, or one whose free is pending, is never recycled. The holders
// outside the allocator (the replay's live table, sim/workers' live
// blocks, cmd/libmemreplay's pointer table, the scenario tests' names, a
// recorder) keep a *Block from Malloc until the Free that returns it, as
// Block's comment says they must (the replay reads a block whose free is
// pending until its free_completed, which the rule allows: its events
// keep it out of every merge; a stitched block is recycled within its
// Free, so sim/workers reads its size before the Free); observers get
// TraceEntry values and never a *Block, and snapshots copy addresses and
// sizes out. Segments are not reused at all: a released segment's object
// is left to the collector with its chunk, since a policy (stitch's
// lentTo) may still point at one.
//
// One exception: Allocator.Discard, the end of the allocator's life, takes
// its Blocks' chunks back whole, zeroed, for the allocators made after it
// (chunkPool, below). The caller promises that nothing holds a *Block of
// the discarded allocator any more, so that rule above is the caller's
// there; the discarded allocator itself refuses every later call and
// drops its own references to its blocks.
//
// Chunks grow geometrically, from slabFirst objects to slabMax, so that a
// small allocator (a test's, a restored snapshot's) stays small and a big
// one makes few chunks.
type slab[T any] struct {
	chunk []T
	next  int // the size of the next chunk
	// pool, when set, is where chunks come from first and go back to at
	// discard; made then lists every chunk this slab took, whole.
	pool *chunkPool[T]
	made []*[]T
}

const (
	slabFirst   = 32
	slabMax     = 1024
	slabClasses = 6 // slabFirst << i for i < slabClasses is slabMax at most
)

// get returns a zeroed object.
func (s *slab[T]) get() *T {
	if len(s.chunk) == 0 {
		s.refill()
	}
	p := &s.chunk[0]
	s.chunk = s.chunk[1:]
	return p
}

func (s *slab[T]) refill() {
	n := max(s.next, slabFirst)
	s.next = min(2*n, slabMax)
	if s.pool == nil {
		s.chunk = make([]T, n)
		return
	}
	c := s.pool.get(n)
	s.made = append(s.made, c)
	s.chunk = *c
}

// discard zeroes every chunk the slab took and hands it back to its pool;
// the slab is empty after, and no object it gave out may be used again.
func (s *slab[T]) discard() {
	for _, c := range s.made {
		clear(*c)
		s.pool.put(c)
	}
	clear(s.made)
	s.chunk, s.next, s.made = nil, 0, s.made[:0]
}

// A chunkPool keeps the chunks of discarded slabs, zeroed, for the slabs
// of allocators made after (Allocator.Discard): sim/workers starts four
// fresh processes per run of the trial model, each growing its Blocks to
// its peak, and those chunks were two thirds of the bytes a run
// allocated, so they paced the collector. A list per chunk size, under a
// lock (a sweep runs mixes on several goroutines), at most
// maxPooledChunks long: the pool holds a few MiB at most, for as long as
// the process lives. Not a sync.Pool: its per-P private slots hid a
// chunk from the other Ps now and then, so that an allocator made on
// another thread grew a fresh one.
type chunkPool[T any] struct {
	mu    sync.Mutex
	class [slabClasses][]*[]T // slabFirst << i long, zeroed
}

const maxPooledChunks = 16

// classOf is the class of chunks n long, or -1 when no class has n.
func classOf(n int) int {
	for i := range slabClasses {
		if slabFirst<<i == n {
			return i
		}
	}
	return -1
}

func (p *chunkPool[T]) get(n int) *[]T {
	if i := classOf(n); i >= 0 {
		p.mu.Lock()
		l := p.class[i]
		if k := len(l); k > 0 {
			c := l[k-1]
			l[k-1] = nil
			p.class[i] = l[:k-1]
			p.mu.Unlock()
			return c
		}
		p.mu.Unlock()
	}
	c := make([]T, n)
	return &c
}

// put keeps c, zeroed.
func (p *chunkPool[T]) put(c *[]T) {
	i := classOf(len(*c))
	if i < 0 {
		return
	}
	p.mu.Lock()
	if len(p.class[i]) < maxPooledChunks {
		p.class[i] = append(p.class[i], c)
	}
	p.mu.Unlock()
}

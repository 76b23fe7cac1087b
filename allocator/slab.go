package allocator

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
// Chunks grow geometrically, from slabFirst objects to slabMax, so that a
// small allocator (a test's, a restored snapshot's) stays small and a big
// one makes few chunks.
type slab[T any] struct {
	chunk []T
	next  int // the size of the next chunk
}

const (
	slabFirst = 32
	slabMax   = 1024
)

// get returns a zeroed object.
func (s *slab[T]) get() *T {
	if len(s.chunk) == 0 {
		n := max(s.next, slabFirst)
		s.chunk = make([]T, n)
		s.next = min(2*n, slabMax)
	}
	p := &s.chunk[0]
	s.chunk = s.chunk[1:]
	return p
}

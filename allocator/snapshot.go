package allocator

import (
	"cmp"
	"slices"
)

// Block states in a snapshot, PyTorch's strings.
const (
	StateActiveAllocated   = "active_allocated"
	StateActivePendingFree = "active_pending_free" // freed, waiting for record-stream events
	StateInactive          = "inactive"
)

// Snapshot is torch.cuda.memory._snapshot()["segments"] for one device.
type Snapshot struct {
	Segments []SegmentInfo
}

// SegmentInfo is one segment dict: a cudaMalloc segment, or one contiguous
// mapped run of an expandable segment.
type SegmentInfo struct {
	Device        int
	Address       uint64
	TotalSize     uint64
	AllocatedSize uint64
	ActiveSize    uint64
	RequestedSize uint64
	Stream        Stream
	SegmentType   string // "small" or "large": the pool
	PoolID        [2]int64
	IsExpandable  bool
	Blocks        []BlockInfo
}

// BlockInfo is one block dict.
type BlockInfo struct {
	Address       uint64
	Size          uint64
	RequestedSize uint64
	State         string
}

// Snapshot returns the segments sorted by address, as PyTorch's snapshot
// reports them.
func (a *Allocator) Snapshot() Snapshot {
	if a.lock() {
		defer a.mu.Unlock()
	}
	return a.snapshot()
}

func (a *Allocator) snapshot() Snapshot {
	// A run ends at a block lent to a stitched range: the stitched range
	// shows as a run of its own, the lent block in neither.
	inRun := func(b *Block) bool { return b != nil && b.mapped && b.lentTo == nil }
	// Each mapped run is a segment; a block after a mapped one continues
	// the run.
	starts := func(b *Block) bool { return inRun(b) && !inRun(b.prev) }
	// The runs and their blocks are counted first, so that the segments
	// and every segment's blocks are carved from one array each: a slice
	// grown per segment cost a profiler's capture most of its allocations.
	runs, blocks := 0, 0
	for _, seg := range a.segments {
		for b := seg.head; b != nil; b = b.next {
			if starts(b) {
				runs++
			}
			if inRun(b) {
				blocks++
			}
		}
	}
	if runs == 0 {
		return Snapshot{}
	}
	out := make([]SegmentInfo, 0, runs)
	all := make([]BlockInfo, blocks)
	for _, seg := range a.segments {
		for b := seg.head; b != nil; b = b.next {
			if !starts(b) {
				continue
			}
			si := SegmentInfo{
				Device: a.device, Address: b.addr, Stream: b.stream,
				SegmentType: "large", IsExpandable: seg.exp != nil || seg.stitch != nil,
			}
			if seg.pool.small {
				si.SegmentType = "small"
			}
			n := 0
			for r := b; inRun(r); r = r.next {
				bi := BlockInfo{Address: r.addr, Size: r.size, RequestedSize: r.requested, State: StateInactive}
				active := r.active()
				si.TotalSize += r.size
				if r.allocated {
					bi.State = StateActiveAllocated
					si.AllocatedSize += r.size
				} else if active {
					bi.State = StateActivePendingFree
				}
				if active {
					si.ActiveSize += r.size
					si.RequestedSize += r.requested
				}
				all[n] = bi
				n++
			}
			// Capped: appending to one segment's blocks cannot overwrite
			// the next one's.
			si.Blocks, all = all[:n:n], all[n:]
			out = append(out, si)
		}
	}
	// Addresses are distinct: the order is the one sort.Slice gave.
	slices.SortFunc(out, func(x, y SegmentInfo) int { return cmp.Compare(x.Address, y.Address) })
	return Snapshot{Segments: out}
}

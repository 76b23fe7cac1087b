package allocator

import "sort"

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
	var out []SegmentInfo
	// A run ends at a block lent to a stitched range: the stitched range
	// shows as a run of its own, the lent block in neither.
	inRun := func(b *Block) bool { return b != nil && b.mapped && b.lentTo == nil }
	for _, seg := range a.segments {
		for b := seg.head; b != nil; b = b.next {
			// Each mapped run is a segment; a block after a mapped one
			// continues the run.
			if !inRun(b) || inRun(b.prev) {
				continue
			}
			si := SegmentInfo{
				Device: a.device, Address: b.addr, Stream: b.stream,
				SegmentType: "large", IsExpandable: seg.exp != nil || seg.stitch != nil,
			}
			if seg.pool.small {
				si.SegmentType = "small"
			}
			for r := b; inRun(r); r = r.next {
				bi := BlockInfo{Address: r.addr, Size: r.size, RequestedSize: r.requested, State: StateInactive}
				active := r.allocated || r.eventCount > 0 || len(r.streamUses) > 0
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
				si.Blocks = append(si.Blocks, bi)
			}
			out = append(out, si)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return Snapshot{Segments: out}
}

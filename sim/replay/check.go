package replay

import (
	"fmt"
	"sort"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// compareFinal compares device dev's recorded final segments with the
// replay's snapshot and describes the first difference ("" when equal).
// Segments compare by address, size, stream, pool and expandability; blocks
// by address, size and state, and by requested size while active (PyTorch
// leaves a stale requested size on free blocks, which a replay need not
// reproduce).
func compareFinal(dev int32, final []trace.Segment, snap allocator.Snapshot, tr func(uint64) uint64) string {
	var want []*trace.Segment
	for i := range final {
		if final[i].Device == dev {
			s := final[i]
			s.Address = tr(s.Address)
			s.Blocks = append([]trace.Block(nil), s.Blocks...)
			for j := range s.Blocks {
				s.Blocks[j].Address = tr(s.Blocks[j].Address)
			}
			want = append(want, &s)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Address < want[j].Address })
	got := snap.Segments
	for i := 0; i < len(want) || i < len(got); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("device %d: recorded segment at %#x (%d bytes) missing from the replay", dev, want[i].Address, want[i].TotalSize)
		case i >= len(want):
			return fmt.Sprintf("device %d: replay has an extra segment at %#x (%d bytes)", dev, got[i].Address, got[i].TotalSize)
		}
		w, g := want[i], &got[i]
		if w.Address != g.Address || w.TotalSize != g.TotalSize {
			return fmt.Sprintf("device %d: segment %d: recorded %#x (%d bytes), replay %#x (%d bytes)", dev, i, w.Address, w.TotalSize, g.Address, g.TotalSize)
		}
		if w.Stream != uint64(g.Stream) || (w.Pool != "" && w.Pool != g.SegmentType) || w.Expandable != g.IsExpandable {
			return fmt.Sprintf("device %d: segment %#x: recorded stream %d pool %s expandable %v, replay stream %d pool %s expandable %v",
				dev, w.Address, w.Stream, w.Pool, w.Expandable, g.Stream, g.SegmentType, g.IsExpandable)
		}
		if len(w.Blocks) != len(g.Blocks) {
			return fmt.Sprintf("device %d: segment %#x: recorded %d blocks, replay %d", dev, w.Address, len(w.Blocks), len(g.Blocks))
		}
		for j := range w.Blocks {
			wb, gb := &w.Blocks[j], &g.Blocks[j]
			if wb.Address != gb.Address || wb.Size != gb.Size || wb.State.String() != gb.State ||
				(wb.State != trace.BlockInactive && wb.RequestedSize != gb.RequestedSize) {
				return fmt.Sprintf("device %d: segment %#x block %d: recorded %#x %d bytes %s (requested %d), replay %#x %d bytes %s (requested %d)",
					dev, w.Address, j, wb.Address, wb.Size, wb.State, wb.RequestedSize, gb.Address, gb.Size, gb.State, gb.RequestedSize)
			}
		}
	}
	return ""
}

package replay

import (
	"errors"
	"fmt"
	"sort"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// placeInitial is restore under a policy other than PyTorch's. The
// recorded segments are PyTorch's answer to an allocation order the trace
// does not show; rebuilding them would fix the what-if's peak reserved
// before its first event. So the policy places the live blocks itself, as
// one batch, largest first (the order in which a best-fit allocator packs
// best when the real order is unknown), each with its requested size on
// its stream; the free blocks of the recorded segments are not rebuilt.
// Blocks pending free are then freed as restore frees them.
func (d *devState) placeInitial(segs []*trace.Segment) error {
	type initBlock struct {
		seg *trace.Segment
		b   *trace.Block
	}
	var blocks []initBlock
	for _, s := range segs {
		for i := range s.Blocks {
			if s.Blocks[i].State != trace.BlockInactive {
				blocks = append(blocks, initBlock{s, &s.Blocks[i]})
			}
		}
	}
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].b.Size > blocks[j].b.Size })
	for _, ib := range blocks {
		b := ib.b
		size := b.RequestedSize
		if size == 0 {
			size = b.Size
		}
		lb, err := d.a.Malloc(size, allocator.Stream(ib.seg.Stream))
		if err != nil {
			var oom *allocator.OutOfMemoryError
			if errors.As(err, &oom) {
				return &trace.FormatError{File: d.rp.opts.Name, Offset: -1, Event: -1,
					Msg: fmt.Sprintf("placing the block live at %#x before the trace on device %d under policy %s",
						b.Address, d.index, d.a.Policy().Name()), Err: err}
			}
			return fmt.Errorf("replay: device %d: placing the initial blocks: %w", d.index, err)
		}
		if err := d.mapInitial(b, lb); err != nil {
			return err
		}
	}
	if r := d.rp.res.Reconstructed; r != nil && !r.Placed {
		r.Placed = true
		r.Notes = append(append([]string(nil), r.Notes...), fmt.Sprintf("the blocks live before the first event were placed by the %s policy as one batch, largest first; the recorded segments were not rebuilt",
			d.a.Policy().Name()))
	}
	return nil
}

package replay

import (
	"errors"
	"fmt"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// restore rebuilds the device's segments that existed before the first
// event (the trace's Initial state), at their recorded addresses, and maps
// their live blocks. Under expandable_segments:True the segments are
// restored as ordinary ones and the setting switched on afterwards, as if
// the program had changed it after loading its model: PyTorch keeps such
// segments, and a snapshot does not carry an expandable segment's pages.
func (d *devState) restore() error {
	segs := d.rp.initBy[d.index]
	if len(segs) == 0 {
		return nil
	}
	if pol := d.rp.opts.Policy; pol != nil && pol.Name() != (allocator.PyTorch{}).Name() {
		return d.placeInitial(segs)
	}
	cfg := d.rp.cfg
	if cfg.ExpandableSegments {
		plain := cfg
		plain.ExpandableSegments = false
		if err := d.a.SetConfig(plain); err != nil {
			return err
		}
		defer func() { _ = d.a.SetConfig(cfg) }()
	}
	// The live table is sized once for the blocks restored live, rather
	// than grown as they come (real snapshots start with thousands).
	live := 0
	for _, s := range segs {
		for i := range s.Blocks {
			if s.Blocks[i].State != trace.BlockInactive {
				live++
			}
		}
	}
	d.live.reserve(d.live.len() + live)
	var blocks []allocator.RestoreBlock // reused from segment to segment: Restore keeps none
	for _, s := range segs {
		rs := allocator.RestoreSegment{Size: s.TotalSize, Stream: allocator.Stream(s.Stream), Small: s.Pool == "small",
			Blocks: blocks[:0]}
		for _, b := range s.Blocks {
			rs.Blocks = append(rs.Blocks, allocator.RestoreBlock{Size: b.Size, Requested: b.RequestedSize,
				Allocated: b.State != trace.BlockInactive})
		}
		blocks = rs.Blocks
		d.dev.force = s.Address
		bases, live, err := d.a.Restore([]allocator.RestoreSegment{rs})
		d.dev.force = 0
		if errors.Is(err, allocator.ErrFatal) {
			// A corrupted context (a real GPU's sticky error): the
			// device's failure, not the trace's.
			return fmt.Errorf("replay: device %d: restoring the initial segment at %#x: %w", d.index, s.Address, err)
		}
		if err != nil {
			return &trace.FormatError{File: d.rp.opts.Name, Offset: -1, Event: -1,
				Msg: fmt.Sprintf("initial segment at %#x on device %d", s.Address, d.index), Err: err}
		}
		if bases[0] != s.Address {
			return &trace.FormatError{File: d.rp.opts.Name, Offset: -1, Event: -1,
				Msg: fmt.Sprintf("initial segment at %#x on device %d overlaps another", s.Address, d.index)}
		}
		k := 0
		for i := range s.Blocks {
			b := &s.Blocks[i]
			if b.State == trace.BlockInactive {
				continue
			}
			lb := live[0][k]
			k++
			if err := d.mapInitial(b, lb); err != nil {
				return err
			}
		}
	}
	return nil
}

// mapInitial maps lb, the allocator's block for b (a block live or pending
// free before the first event, restored or placed), at b's recorded
// address. A block pending free (freed, waiting on stream events) is freed
// again on a private stream whose event completes when the trace shows its
// free_completed.
func (d *devState) mapInitial(b *trace.Block, lb *allocator.Block) error {
	stack := b.Stack
	if stack == 0 {
		stack = d.rp.beforeTraceStack()
	}
	if rec := d.rp.opts.Recorder; rec != nil {
		rec.Alloc(d.index, -1, lb, stack)
	}
	if b.State != trace.BlockPendingFree {
		d.live.set(b.Address, liveBlock{b: lb, stack: stack, at: -1})
		return nil
	}
	if rec := d.rp.opts.Recorder; rec != nil {
		rec.Free(d.index, -1, lb, stack)
	}
	d.synth++
	synth := allocator.Stream(synthStreamBase + d.synth)
	if err := d.a.RecordStream(lb, synth); err != nil {
		return err
	}
	if err := d.a.Free(lb); err != nil {
		return err
	}
	d.live.set(b.Address, liveBlock{b: lb, stack: stack, at: -1, synth: synth, pending: true})
	return nil
}

// BeforeTraceFrame is the one frame of the stack a replay gives the blocks
// that were live before a trace's first event and have no stack of their
// own (allocated before _record_memory_history started, as a model's
// weights usually are), so that reports name them for what they are
// rather than as "no stack".
var BeforeTraceFrame = trace.Frame{Name: "<live before the trace; no stack recorded>"}

// beforeTraceStack interns BeforeTraceFrame's stack in the trace's table
// (0 when the trace has none).
func (rp *replayer) beforeTraceStack() trace.StackID {
	if rp.hasBeforeStack {
		return rp.beforeStack
	}
	if st := rp.r.Stacks(); st != nil {
		rp.beforeStack = st.Intern([]trace.Frame{BeforeTraceFrame})
	}
	rp.hasBeforeStack = true
	return rp.beforeStack
}

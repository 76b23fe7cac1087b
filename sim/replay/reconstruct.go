package replay

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/trace"
)

// Reconstructing the state before a partial trace.
//
// Most real snapshots start after the model was loaded, or their ring buffer
// dropped the oldest entries, so the trace frees blocks it never allocated
// and serves allocations from segments it never created. Reconstruct infers
// the allocator state at the first event from the events and the final
// segments, walking the events once per device:
//
//   - a segment that exists at the end but was not created by a
//     segment_alloc of the trace existed at the start; so did one freed by a
//     segment_free without a segment_alloc before it;
//   - a block freed by the trace before any alloc at its address was live at
//     the start (pending its free_completed if the trace shows only that);
//     so was an active block of the final segments that no alloc of the trace
//     accounts for;
//   - the free space of a segment at the start is what its live blocks leave,
//     as single free blocks between them: the allocator never leaves two free
//     blocks side by side.
//
// A live block's size comes from the final segments when it is still live
// at the end. A block freed during the trace shows only its requested size:
// its size is the rounded request, grown to the next live block or the
// segment's end when the remainder is too small to have been split off
// (should_split), which is how best fit would have carved it. Such sizes
// are counted as inferred. A freed block inside an expandable run (mapped
// or unmapped by the trace, or in its final state), which cannot be
// restored, gets a segment of its own at its address, so that its free
// replays; these are counted as unresolved, and a note says so. A freed
// block outside every known segment and run is explained by nothing the
// trace holds: it is left out, and the replay reports its free as bad
// input (a free of an address the trace never allocated).

// Reconstruct fills t.Initial when the trace does not start from an empty
// allocator, and returns what it rebuilt (nil for a complete trace). The
// rounding rules are those of the recording: cfg is the trace's own
// allocator configuration.
func Reconstruct(t *trace.Trace, cfg config.Config, policy allocator.Policy) *Reconstruction {
	return reconstruct(wholeOf(t), cfg, policy)
}

// ReconstructPacked is Reconstruct for a trace with packed events.
func ReconstructPacked(p *trace.Packed, cfg config.Config, policy allocator.Policy) *Reconstruction {
	return reconstruct(packedOf(p), cfg, policy)
}

// whole is a trace held whole, a Trace or a Packed, as the reconstruction
// reads and completes it: it walks the events (each, in order, with their
// index) and sets the initial state and the header.
type whole struct {
	header        *trace.Header
	initial       *[]trace.Segment
	reconstructed *bool
	final         []trace.Segment
	hasFinal      bool
	each          func(fn func(i int64, e *trace.Event))
}

func wholeOf(t *trace.Trace) *whole {
	return &whole{header: &t.Header, initial: &t.Initial, reconstructed: &t.InitialReconstructed,
		final: t.Final, hasFinal: t.HasFinal,
		each: func(fn func(int64, *trace.Event)) {
			for i := range t.Events {
				fn(int64(i), &t.Events[i])
			}
		}}
}

func packedOf(p *trace.Packed) *whole {
	return &whole{header: &p.Header, initial: &p.Initial, reconstructed: &p.InitialReconstructed,
		final: p.Final, hasFinal: p.HasFinal,
		each: func(fn func(int64, *trace.Event)) {
			cur := p.Events.Cursor()
			var e trace.Event
			for i := int64(0); cur.Next(&e) == nil; i++ {
				fn(i, &e)
			}
		}}
}

func reconstruct(t *whole, cfg config.Config, policy allocator.Policy) *Reconstruction {
	rec, _, _ := reconstructWalk(t, cfg, policy)
	return rec
}

// reconstructWalk is reconstruct; when it walked the events (walked),
// it also returns their ooms, for impliedFrom, so that Prepare walks a
// trace of millions of events once.
func reconstructWalk(t *whole, cfg config.Config, policy allocator.Policy) (*Reconstruction, oomWalk, bool) {
	if policy == nil {
		policy = allocator.PyTorch{}
	}
	if *t.initial != nil {
		if *t.reconstructed {
			return summarize(*t.initial, t.header.Notes), oomWalk{}, false
		}
		return nil, oomWalk{}, false
	}
	r := NewWalk()
	t.each(r.Event)
	return r.finish(t, cfg, policy), r.implied(), true
}

// Walk is the reconstruction's walk over the events; it is a
// trace.EventObserver, so that it can walk a snapshot while it is
// imported (OpenPrepared, OpenPreparedWalk).
type Walk struct {
	devs    map[int32]*devWalk
	w       *devWalk
	lastDev int32
	ooms    []oomAt
}

// NewWalk returns a walk that has seen no event.
func NewWalk() *Walk { return &Walk{devs: map[int32]*devWalk{}} }

// FromStart says whether the events walked so far fit a trace recorded
// from its start: no oom (a capacity it may imply) and, on the device of
// the latest event, no block or segment from before the first event. A
// caller that asks after every event (the speculative replay, which gives
// its guess up as soon as this is false) therefore learns of such a block
// at the event that shows it, on any device.
func (r *Walk) FromStart() bool {
	w := r.w
	return len(r.ooms) == 0 && (w == nil || len(w.preLive) == 0 && len(w.pre) == 0)
}

// implied is what impliedFrom needs of the walk: the ooms, and each
// device's peak of reserved bytes.
func (r *Walk) implied() oomWalk {
	peaks := make(map[int32]int64, len(r.devs))
	for d, w := range r.devs {
		peaks[d] = w.peak
	}
	return oomWalk{ooms: r.ooms, peaks: peaks}
}

// Restart forgets the events seen (trace.EventObserver).
func (r *Walk) Restart() { *r = *NewWalk() }

func (r *Walk) walk(d int32) *devWalk {
	w := r.devs[d]
	if w == nil {
		w = &devWalk{created: map[uint64]bool{}, pre: map[uint64]*trace.Segment{},
			preLive: map[uint64]struct{}{}}
		r.devs[d] = w
	}
	return w
}

// Event walks one event (trace.EventObserver).
func (r *Walk) Event(i int64, e *trace.Event) {
	if r.w == nil || e.Device != r.lastDev {
		r.w, r.lastDev = r.walk(e.Device), e.Device
	}
	w := r.w
	switch e.Action {
	case trace.ActionAlloc:
		*w.state.at(e.Addr) = stAllocated
	case trace.ActionFreeRequested:
		switch st := w.state.at(e.Addr); *st {
		case stAllocated:
			*st = stPending
		case stNone:
			*st = stPending
			w.addLive(preBlock{addr: e.Addr, requested: e.Size, stream: e.Stream})
		}
	case trace.ActionFreeCompleted:
		switch st := w.state.at(e.Addr); *st {
		case stPending:
			// Remembered: a later free of the address is a double
			// free, not a block from before the trace.
			*st = stFreed
		case stNone:
			w.addLive(preBlock{addr: e.Addr, requested: e.Size, stream: e.Stream, pending: true})
		}
	case trace.ActionSegmentMap, trace.ActionSegmentUnmap:
		w.expandable = append(w.expandable, addrRange{e.Addr, e.Size})
		if e.Action == trace.ActionSegmentMap {
			w.reserved += int64(e.Size)
			w.peak = max(w.peak, w.reserved)
		} else {
			w.reserved -= int64(e.Size)
		}
	case trace.ActionOOM:
		r.ooms = append(r.ooms, oomAt{i: i, dev: e.Device, free: e.DeviceFree, size: e.Size, delta: w.reserved})
	case trace.ActionSegmentAlloc:
		w.reserved += int64(e.Size)
		w.peak = max(w.peak, w.reserved)
		w.created[e.Addr] = true
	case trace.ActionSegmentFree:
		w.reserved -= int64(e.Size)
		if w.created[e.Addr] {
			delete(w.created, e.Addr)
		} else if _, seen := w.pre[e.Addr]; !seen {
			w.addPre(&trace.Segment{Device: e.Device, Address: e.Addr, TotalSize: e.Size, Stream: e.Stream})
		}
	}
}

// finish adds what the final segments say and lays out the initial
// state, once every event was walked.
func (r *Walk) finish(t *whole, cfg config.Config, policy allocator.Policy) *Reconstruction {
	if policy == nil {
		policy = allocator.PyTorch{}
	}
	devs, walk := r.devs, r.walk
	if t.hasFinal {
		// The final segments' copies come from one array, sized once, not
		// one allocation each (real snapshots end with thousands).
		copies := make([]trace.Segment, 0, len(t.final))
		// preLive is about to take the final state's live blocks: sized
		// for them once rather than rehashed as it grows (the events
		// leave it empty or nearly so).
		want := map[int32]int{}
		for i := range t.final {
			if s := &t.final[i]; !s.Expandable {
				want[s.Device] += len(s.Blocks)
			}
		}
		for d, n := range want {
			w := walk(d)
			if n > 64 {
				m := make(map[uint64]struct{}, len(w.preLive)+n)
				for a := range w.preLive {
					m[a] = struct{}{}
				}
				w.preLive = m
				w.lives = slices.Grow(w.lives, n)
			}
		}
		for i := range t.final {
			s := &t.final[i]
			w := walk(s.Device)
			if s.Expandable {
				// A mapped run; its pages cannot be restored.
				w.skippedExpandable++
				w.expandable = append(w.expandable, addrRange{s.Address, s.TotalSize})
				continue
			}
			if !w.created[s.Address] {
				if _, seen := w.pre[s.Address]; !seen {
					copies = append(copies, *s)
					c := &copies[len(copies)-1]
					c.Blocks = nil
					w.addPre(c)
				}
				for _, b := range s.Blocks {
					if b.State != trace.BlockInactive && w.state.get(b.Address) == stNone {
						w.addLive(preBlock{addr: b.Address, size: b.Size, requested: b.RequestedSize,
							stream: s.Stream, stack: b.Stack, pending: b.State == trace.BlockPendingFree, known: true})
					}
				}
			}
			if s.Pool != "" {
				if p := w.pre[s.Address]; p != nil {
					p.Pool = s.Pool
				}
			}
		}
	}

	var out []trace.Segment
	rec := &Reconstruction{}
	ids := make([]int32, 0, len(devs))
	for d := range devs {
		ids = append(ids, d)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, d := range ids {
		out = append(out, devs[d].build(d, &cfg, policy, rec)...)
		if n := devs[d].skippedExpandable; n > 0 {
			rec.Notes = append(rec.Notes, fmt.Sprintf("device %d: %d expandable segment runs could not be reconstructed", d, n))
		}
	}
	if len(out) == 0 {
		return nil
	}
	rec.Segments = len(out)
	for _, s := range out {
		rec.SegmentBytes += s.TotalSize
	}
	rec.Notes = append([]string{fmt.Sprintf("initial state reconstructed: %d segments (%s), %d blocks live before the first event (%s), %d block sizes inferred, %d blocks in unrestorable expandable runs given a segment of their own",
		rec.Segments, allocator.FormatSize(rec.SegmentBytes), rec.LiveBlocks, allocator.FormatSize(rec.LiveBytes), rec.InferredSizes, rec.Unresolved)}, rec.Notes...)
	*t.initial = out
	*t.reconstructed = true
	t.header.Notes = append(t.header.Notes, rec.Notes...)
	return rec
}

const (
	stNone      uint8 = iota
	stAllocated       // allocated by the trace
	stPending         // freed, waiting for free_completed
	stFreed           // allocated and freed by the trace
)

type devWalk struct {
	created  map[uint64]bool
	pre      map[uint64]*trace.Segment // segments that existed at the start
	state    addrStates
	reserved int64 // segment bytes the events created less those they freed, so far
	peak     int64 // the most reserved ever was (impliedFrom's lower bound of a limit)
	// preLive holds the addresses in lives, the blocks live before the
	// first event, in the order they were found: the final state's come
	// in address order, so that build's sort has little to do (ordered
	// by a map's iteration, they were sorted from scratch).
	preLive map[uint64]struct{}
	lives   []preBlock
	// segs is pre's values in the order they were found, for the same
	// reason.
	segs              []*trace.Segment
	skippedExpandable int
	// expandable holds the expandable runs the trace names (mapped,
	// unmapped, or in the final state): a block freed inside one is
	// explained though its run cannot be restored.
	expandable []addrRange
	reach      []uint64
}

// addLive adds b to the blocks live before the first event, unless its
// address is there already (the first found wins).
func (w *devWalk) addLive(b preBlock) {
	if _, seen := w.preLive[b.addr]; !seen {
		w.preLive[b.addr] = struct{}{}
		w.lives = append(w.lives, b)
	}
}

// addPre adds s to the segments that existed at the start; the caller
// checked its address is not there yet.
func (w *devWalk) addPre(s *trace.Segment) {
	w.pre[s.Address] = s
	w.segs = append(w.segs, s)
}

type addrRange struct{ addr, size uint64 }

// inExpandable says whether addr lies in one of the expandable runs;
// w.reach must be set (sortExpandable).
func (w *devWalk) inExpandable(addr uint64) bool {
	i := sort.Search(len(w.expandable), func(i int) bool { return w.expandable[i].addr > addr }) - 1
	return i >= 0 && w.reach[i] > addr
}

// sortExpandable orders the runs by address and sets reach[i], the
// furthest end among the first i+1 (runs may overlap).
func (w *devWalk) sortExpandable() {
	sort.Slice(w.expandable, func(i, j int) bool { return w.expandable[i].addr < w.expandable[j].addr })
	w.reach = make([]uint64, len(w.expandable))
	var far uint64
	for i, r := range w.expandable {
		far = max(far, r.addr+r.size)
		w.reach[i] = far
	}
}

type preBlock struct {
	addr, size, requested, stream uint64
	stack                         trace.StackID
	pending                       bool // only its free_completed is in the trace
	known                         bool // size known (from the final segments)
}

func bySegmentAddress(a, b *trace.Segment) int { return cmp.Compare(a.Address, b.Address) }

// build lays out the device's initial segments.
func (w *devWalk) build(dev int32, cfg *config.Config, policy allocator.Policy, rec *Reconstruction) []trace.Segment {
	segs := w.segs // sorted in place: build runs once
	slices.SortFunc(segs, bySegmentAddress)
	blocks := w.lives
	// slices.SortFunc: sort.Slice's reflection swapper was most of the
	// sort's time, for the same order (the same pdqsort).
	slices.SortFunc(blocks, func(a, b preBlock) int { return cmp.Compare(a.addr, b.addr) })

	// Blocks outside every known segment but inside an expandable run get
	// a segment of their own.
	w.sortExpandable()
	var orphans []*preBlock // in blocks
	inSeg := func(addr uint64) *trace.Segment {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Address+segs[i].TotalSize > addr })
		if i < len(segs) && segs[i].Address <= addr {
			return segs[i]
		}
		return nil
	}
	for i := range blocks {
		if inSeg(blocks[i].addr) == nil {
			orphans = append(orphans, &blocks[i])
		}
	}
	for _, b := range orphans {
		if !w.inExpandable(b.addr) {
			// Nothing the trace holds explains the block: its free is
			// bad input, which the replay reports (or, under Lenient,
			// counts and skips) at the event.
			continue
		}
		size := b.size
		if !b.known {
			size = policy.RoundSize(cfg, b.requested)
		}
		if inSeg(b.addr) != nil || inSeg(b.addr+size-1) != nil {
			continue // overlaps: left unresolved, its free will be reported
		}
		s := &trace.Segment{Device: dev, Address: b.addr, TotalSize: size, Stream: b.stream}
		segs = append(segs, s)
		slices.SortFunc(segs, bySegmentAddress)
		rec.Unresolved++
	}

	out := make([]trace.Segment, 0, len(segs))
	// Every segment's blocks are carved from one array: a live block and
	// the free gap before it, and a free tail, at most.
	all := make([]trace.Block, 0, 2*len(blocks)+len(segs))
	bi := 0
	for _, s := range segs {
		seg := *s
		seg.Device = dev
		end := s.Address + s.TotalSize
		if seg.Pool == "" {
			seg.Pool = "large"
			if s.TotalSize == allocator.SmallBuffer {
				seg.Pool = "small"
			}
		}
		small := seg.Pool == "small"
		for bi < len(blocks) && blocks[bi].addr < s.Address {
			bi++
		}
		first := bi
		for bi < len(blocks) && blocks[bi].addr < end {
			bi++
		}
		mine := blocks[first:bi]
		at := s.Address
		seg.Blocks = nil
		n := len(all)
		for k := range mine {
			b := &mine[k]
			if b.addr > at {
				all = append(all, trace.Block{Address: at, Size: b.addr - at})
			}
			limit := end
			if k+1 < len(mine) {
				limit = mine[k+1].addr
			}
			size := b.size
			if !b.known {
				size = policy.RoundSize(cfg, b.requested)
				gap := limit - b.addr
				if size > gap || !policy.ShouldSplit(cfg, gap, size, small) {
					size = gap
				}
				rec.InferredSizes++
			}
			size = min(size, limit-b.addr)
			st := trace.BlockAllocated
			if b.pending {
				st = trace.BlockPendingFree
			}
			all = append(all, trace.Block{Address: b.addr, Size: size, RequestedSize: b.requested, State: st, Stack: b.stack})
			rec.LiveBlocks++
			rec.LiveBytes += size
			at = b.addr + size
		}
		if at < end {
			all = append(all, trace.Block{Address: at, Size: end - at})
		}
		if len(all) > n {
			seg.Blocks = all[n:len(all):len(all)]
		}
		out = append(out, seg)
	}
	return out
}

// summarize describes a stored reconstructed state.
func summarize(init []trace.Segment, notes []string) *Reconstruction {
	r := &Reconstruction{Segments: len(init), Notes: notes}
	for _, s := range init {
		r.SegmentBytes += s.TotalSize
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				r.LiveBlocks++
				r.LiveBytes += b.Size
			}
		}
	}
	return r
}

// ImpliedCapacity fills in the capacity of every device of t whose header
// does not give one, from its oom entries: the driver's free bytes at the
// oom plus what the allocator held then (the smallest such figure, so that
// every recorded OOM can recur). Devices without an oom stay unknown. It
// returns, per device, the event index the figure came from.
//
// An oom at which the driver still had room for the segment the allocator
// asked for did not come from the device: the process ran under a limit,
// torch.cuda.set_per_process_memory_fraction (how one GPU is shared by
// parallel trials, or made to act as a smaller card). When every oom of a
// device is of that kind, the capacity is that limit instead: above the
// most the trace ever reserved (every segment it got fitted) and below
// what each oom held plus the segment it asked for (PyTorch refuses a
// segment when reserved + segment > allowed). Any figure in between
// replays the same; the roundest is taken (the one with the most trailing
// zero bits), the figure a person sets: 24 GiB for a trial limited to
// 24 GiB on a 141 GB card, where the device's own size would replay no
// OOM at all. The segment asked for is PyTorch's get_allocation_size of
// the oom's size; under expandable segments a request of 1 to 10 MiB maps
// only its own pages, not 20 MiB, so there the bound is loose by up to
// 18 MiB (left so: a recorded fraction, expandable segments and an oom on
// such a request together are rare).
func ImpliedCapacity(t *trace.Trace) map[int32]int64 { return impliedCapacity(wholeOf(t)) }

// oomAt is an oom event: its index, device, the driver's free bytes, the
// size asked for, and the segment bytes the events before it had created
// less those they freed (on its device).
type oomAt struct {
	i     int64
	dev   int32
	free  uint64
	size  uint64
	delta int64
}

// oomWalk is what a walk over the events found for impliedFrom: the ooms,
// and each device's peak of segment bytes created less freed.
type oomWalk struct {
	ooms  []oomAt
	peaks map[int32]int64
}

func impliedCapacity(t *whole) map[int32]int64 {
	w := oomWalk{peaks: map[int32]int64{}}
	delta := map[int32]int64{}
	t.each(func(i int64, e *trace.Event) {
		switch e.Action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
			delta[e.Device] += int64(e.Size)
			w.peaks[e.Device] = max(w.peaks[e.Device], delta[e.Device])
		case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
			delta[e.Device] -= int64(e.Size)
		case trace.ActionOOM:
			w.ooms = append(w.ooms, oomAt{i: i, dev: e.Device, free: e.DeviceFree, size: e.Size, delta: delta[e.Device]})
		}
	})
	return impliedFrom(t, w)
}

// impliedFrom is ImpliedCapacity from the trace's ooms.
func impliedFrom(t *whole, w oomWalk) map[int32]int64 {
	initial := map[int32]int64{}
	for _, s := range *t.initial {
		initial[s.Device] += int64(s.TotalSize)
	}
	type implied struct {
		capacity  uint64 // the smallest free + held
		from      int64  // the oom it came from
		limitOnly bool   // every oom left the device room for its segment
		below     uint64 // the least held + segment: a limit is under it
		belowFrom int64
		free      uint64 // the driver's free bytes at belowFrom
	}
	best := map[int32]*implied{}
	cfg := config.Default()
	for _, o := range w.ooms {
		held := uint64(max(initial[o.dev]+o.delta, 0))
		c := o.free + held
		if c == 0 {
			continue // no free bytes recorded (an RMM log): no figure
		}
		seg := allocator.PyTorch{}.AllocationSize(&cfg, o.size)
		b := best[o.dev]
		if b == nil {
			b = &implied{capacity: c, from: o.i, limitOnly: true, below: ^uint64(0)}
			best[o.dev] = b
		} else if c < b.capacity {
			b.capacity, b.from = c, o.i
		}
		if o.free < seg {
			b.limitOnly = false
		}
		if held+seg < b.below {
			b.below, b.belowFrom, b.free = held+seg, o.i, o.free
		}
	}
	ids := make([]int32, 0, len(best))
	for d := range best {
		ids = append(ids, d)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	from := make(map[int32]int64, len(best))
	// No note: the device's CapacitySource says it, and the report notes
	// it once, as used or, under check mode, not.
	for _, d := range ids {
		b := best[d]
		c, src := b.capacity, fmt.Sprintf("implied by the oom at event %d", b.from)
		from[d] = b.from
		if peak := uint64(max(initial[d]+w.peaks[d], 1)); b.limitOnly && peak < b.below {
			// A limit below the device (a memory fraction); a peak at or
			// over the bound means the limit changed during the trace,
			// and the device's size is the one figure left.
			c = roundest(peak, b.below)
			src = fmt.Sprintf("a limit implied by the oom at event %d, where the device had %s free", b.belowFrom,
				allocator.FormatSize(b.free))
			from[d] = b.belowFrom
		}
		found := false
		h := t.header
		for k := range h.Devices {
			if h.Devices[k].Index == d {
				found = true
				if h.Devices[k].Capacity == 0 {
					h.Devices[k].Capacity, h.Devices[k].CapacitySource = c, src
				}
			}
		}
		if !found {
			h.Devices = append(h.Devices, trace.Device{Index: d, Capacity: c, CapacitySource: src})
		}
	}
	return from
}

// roundest is the number in [lo, hi) with the most trailing zero bits (lo
// when lo >= hi).
func roundest(lo, hi uint64) uint64 {
	for k := 63; k >= 0; k-- {
		step := uint64(1) << k
		m := lo &^ (step - 1)
		if m < lo {
			if m += step; m < step {
				continue // past 2^64
			}
		}
		if m < hi {
			return m
		}
	}
	return lo
}

// Prepare readies an in-memory trace for replay: reconstructs the state
// before a partial trace with the recording's own settings, and fills in
// implied capacities.
func Prepare(t *trace.Trace) (*Reconstruction, error) { return prepare(wholeOf(t)) }

// PreparePacked is Prepare for a trace with packed events (a snapshot
// pickle as trace.Open returns it): two passes over the packed events, no
// copy of them.
func PreparePacked(p *trace.Packed) (*Reconstruction, error) { return prepare(packedOf(p)) }

// OpenPrepared opens a trace file (trace.Open) and prepares what it holds
// whole (PrepareOpened). A snapshot pickle's events are walked for the
// reconstruction on a second goroutine while they are imported, rather
// than after; the observers in also, if any, are given them there too
// (only for a snapshot pickle: o.Packed is then set).
func OpenPrepared(path string, also ...trace.EventObserver) (*trace.Opened, *Reconstruction, error) {
	return OpenPreparedWalk(path, NewWalk(), also...)
}

// OpenPreparedWalk is OpenPrepared with the walk (new, from NewWalk),
// which the observers in also are given each event after: the speculative
// replay (sim/replay/speculate) asks it whether the trace still reads as
// recorded from its start.
func OpenPreparedWalk(path string, walk *Walk, also ...trace.EventObserver) (*trace.Opened, *Reconstruction, error) {
	var obs trace.EventObserver = walk
	if len(also) > 0 {
		obs = observers(append([]trace.EventObserver{walk}, also...))
	}
	o, err := trace.OpenWith(path, trace.OpenOptions{Observe: obs})
	if err != nil {
		return nil, nil, err
	}
	if o.Packed == nil || o.Packed.Initial != nil {
		rec, err := PrepareOpened(o)
		if err != nil {
			o.Close()
			return nil, nil, err
		}
		return o, rec, nil
	}
	t := packedOf(o.Packed)
	cfg, err := recordedConfig(t)
	if err != nil {
		o.Close()
		return nil, nil, err
	}
	rec := walk.finish(t, cfg, nil)
	impliedFrom(t, walk.implied())
	return o, rec, nil
}

// observers gives each event to each observer in turn.
type observers []trace.EventObserver

func (os observers) Event(i int64, e *trace.Event) {
	for _, o := range os {
		o.Event(i, e)
	}
}

func (os observers) Restart() {
	for _, o := range os {
		o.Restart()
	}
}

// Progress tells the observers that want it (trace.ProgressObserver).
func (os observers) Progress(events, offset int64) {
	for _, o := range os {
		if po, ok := o.(trace.ProgressObserver); ok {
			po.Progress(events, offset)
		}
	}
}

// PrepareOpened prepares whatever trace o holds whole (nothing for a
// streamed native trace, which records its own initial state).
func PrepareOpened(o *trace.Opened) (*Reconstruction, error) {
	switch {
	case o.Packed != nil:
		return PreparePacked(o.Packed)
	case o.Trace != nil:
		return Prepare(o.Trace)
	}
	return nil, nil
}

// recordedConfig is the recording allocator's configuration.
func recordedConfig(t *whole) (config.Config, error) {
	if t.header.AllocatorSettings == nil {
		return config.Default(), nil
	}
	c, err := config.FromAllocatorSettings(t.header.AllocatorSettings)
	if err != nil {
		return c, &trace.FormatError{File: t.header.SourceFile, Offset: -1, Event: -1, Msg: "allocator_settings", Err: err}
	}
	return c, nil
}

func prepare(t *whole) (*Reconstruction, error) {
	cfg, err := recordedConfig(t)
	if err != nil {
		return nil, err
	}
	rec, ooms, walked := reconstructWalk(t, cfg, nil)
	if walked {
		impliedFrom(t, ooms)
	} else {
		impliedCapacity(t)
	}
	return rec, nil
}

// RunTrace prepares an in-memory trace (Prepare) and replays it.
func RunTrace(t *trace.Trace, opts Options) (*Result, error) {
	if _, err := Prepare(t); err != nil {
		return nil, err
	}
	return Run(t.NewReader(), opts)
}

// addrStates maps an address to its stNone..stFreed state: the
// reconstruction's per-event lookup, a Go map's hashing and probing twice
// per free (the lookup, then the update) before this. Open addressing with
// linear probing, at most half full; entries are never removed.
type addrStates struct {
	slots []addrState
	n     int
	shift uint8
}

type addrState struct {
	addr uint64
	full bool
	st   uint8
}

func (t *addrStates) home(addr uint64) int {
	// Blocks are 512 B aligned: Fibonacci hashing takes the product's
	// high bits.
	return int((addr * 0x9E3779B97F4A7C15) >> t.shift)
}

// at returns the address's state, adding it as stNone if absent; the
// pointer is valid until the next at.
func (t *addrStates) at(addr uint64) *uint8 {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.full {
			*s = addrState{addr: addr, full: true}
			t.n++
			return &s.st
		}
		if s.addr == addr {
			return &s.st
		}
	}
}

// get returns the address's state, stNone if absent.
func (t *addrStates) get(addr uint64) uint8 {
	if t.n == 0 {
		return stNone
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.full {
			return stNone
		}
		if s.addr == addr {
			return s.st
		}
	}
}

func (t *addrStates) grow() {
	old := t.slots
	n := max(64, 2*len(old))
	t.slots = make([]addrState, n)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	mask := n - 1
	for _, s := range old {
		if !s.full {
			continue
		}
		i := t.home(s.addr)
		for t.slots[i].full {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

package replay

import (
	"github.com/google/btree"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// device is the allocator.Device a replayed allocator runs on: a Process
// (simulated, or the real GPU) whose address space is remapped so that the
// allocator sees the recorded addresses. Everything here is independent of
// which: the process's own addresses never meet recorded ones (Process's
// contract), and the scripted failures are answered before the process is
// asked.
//
// Best fit breaks ties by address and merging depends on adjacency, so a
// replay only decides like the recording if its segments sit where the
// recording's did (spec section 11.1). When the allocator asks for a segment
// (or an expandable reservation) and the trace's next expected decision is a
// segment_alloc of that size (a segment_map), the device hands out the
// recorded address; otherwise the simulator's own address, which lies above
// 2^56 and so never collides with a recorded one. A table of ranges
// translates between the two on every later call.
//
// In check mode the device also answers "out of memory" exactly where the
// recording's device did: when the next expected decision is a release or an
// oom rather than a new segment, PyTorch's cudaMalloc must have failed.
type device struct {
	p      Process
	d      *devState
	script bool   // fail where the recording failed (check mode)
	force  uint64 // when set, the address the next segment must get (restoring)
	ranges xranges
	// unaliased holds the reservations placed at the simulator's address
	// (no recorded segment_map to follow), by base, with their sizes.
	unaliased map[uint64]uint64
}

// xrange maps [ours, ours+size) to the simulator's [sim, sim+size).
type xrange struct{ ours, sim, size uint64 }

// xranges is a set of disjoint ranges ordered by ours. A B-tree: a trace
// may hold hundreds of thousands of segments, and releasing them all (an
// out-of-memory's release of the cache) must not move the rest each time.
// The zero value is empty.
type xranges struct{ t *btree.BTreeG[xrange] }

func xrangeLess(a, b xrange) bool { return a.ours < b.ours }

// find returns the range holding addr.
func (x *xranges) find(addr uint64) (xrange, bool) {
	if x.t == nil {
		return xrange{}, false
	}
	var r xrange
	found := false
	x.t.DescendLessOrEqual(xrange{ours: addr}, func(c xrange) bool {
		r, found = c, addr-c.ours < c.size
		return false
	})
	return r, found
}

// free says whether [addr, addr+size) meets no range.
func (x *xranges) free(addr, size uint64) bool {
	if _, ok := x.find(addr); ok {
		return false
	}
	if x.t == nil {
		return true
	}
	ok := true
	x.t.AscendGreaterOrEqual(xrange{ours: addr}, func(c xrange) bool {
		ok = c.ours >= addr+size
		return false
	})
	return ok
}

func (x *xranges) translate(addr uint64) uint64 {
	if r, ok := x.find(addr); ok {
		return r.sim + (addr - r.ours)
	}
	return addr
}

func (x *xranges) insert(r xrange) {
	if x.t == nil {
		x.t = btree.NewG(16, xrangeLess)
	}
	x.t.ReplaceOrInsert(r)
}

// holds says whether a range holds addr.
func (x *xranges) holds(addr uint64) bool {
	_, ok := x.find(addr)
	return ok
}

// remove deletes the range starting at ours and returns it.
func (x *xranges) remove(ours uint64) (xrange, bool) {
	if x.t == nil {
		return xrange{}, false
	}
	return x.t.Delete(xrange{ours: ours})
}

// replayAddressBase is where simulated addresses start: far above the user
// space pointers CUDA hands out, so fresh and recorded addresses never meet.
const replayAddressBase = uint64(1) << 56

var scriptedOOM = &allocator.DeviceError{Call: "cudaMalloc", Code: 2, Name: "cudaErrorMemoryAllocation",
	Msg: "out of memory where the recording's device was", OOM: true}

var _ allocator.VirtualMemory = (*device)(nil)

func (v *device) failHere() bool {
	if !v.script {
		return false
	}
	h := v.d.head()
	return h != nil && (h.action == trace.ActionSegmentFree || h.action == trace.ActionSegmentUnmap || h.action == trace.ActionOOM)
}

// place picks our address for a new range of size bytes that the simulator
// put at simAddr.
func (v *device) place(simAddr, size uint64, want trace.Action) uint64 {
	ours := simAddr
	if v.force != 0 {
		if v.ranges.free(v.force, size) {
			ours = v.force
		}
	} else if h := v.d.head(); h != nil && h.action == want && (want != trace.ActionSegmentAlloc || h.size == size) &&
		h.addr != 0 && h.addr+size > h.addr && v.ranges.free(h.addr, size) && !v.d.aliases.holds(h.addr) {
		ours = h.addr
	}
	if ours == simAddr && want == trace.ActionSegmentMap {
		if v.unaliased == nil {
			v.unaliased = map[uint64]uint64{}
		}
		v.unaliased[ours] = size
	}
	v.ranges.insert(xrange{ours: ours, sim: simAddr, size: size})
	return ours
}

func (v *device) drop(ours uint64) (xrange, bool) {
	r, ok := v.ranges.remove(ours)
	if !ok {
		return xrange{}, false
	}
	delete(v.unaliased, ours)
	return r, true
}

func (v *device) Malloc(size uint64) (uint64, error) {
	if v.failHere() {
		return 0, scriptedOOM
	}
	a, err := v.p.Malloc(size)
	if err != nil {
		return 0, err
	}
	return v.place(a, size, trace.ActionSegmentAlloc), nil
}

func (v *device) Free(addr uint64) error {
	if r, ok := v.drop(addr); ok {
		return v.p.Free(r.sim)
	}
	return v.p.Free(addr)
}

func (v *device) MemGetInfo() (uint64, uint64, error) { return v.p.MemGetInfo() }
func (v *device) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	return v.p.RecordEvent(s)
}
func (v *device) QueryEvent(e allocator.Event) (bool, error) { return v.p.QueryEvent(e) }
func (v *device) SynchronizeEvent(e allocator.Event) error   { return v.p.SynchronizeEvent(e) }

func (v *device) Granularity() uint64 { return v.p.Granularity() }

func (v *device) ReserveAddress(size uint64) (uint64, error) {
	a, err := v.p.ReserveAddress(size)
	if err != nil {
		return 0, err
	}
	return v.place(a, size, trace.ActionSegmentMap), nil
}

func (v *device) FreeAddress(addr, size uint64) error {
	if r, ok := v.drop(addr); ok {
		return v.p.FreeAddress(r.sim, size)
	}
	return v.p.FreeAddress(addr, size)
}

func (v *device) CreatePage(size uint64) (allocator.PageHandle, error) {
	if v.failHere() {
		return 0, scriptedOOM
	}
	return v.p.CreatePage(size)
}

var _ allocator.PageRefuser = (*device)(nil)

// RefusePages passes the question to the process when it can answer it;
// a scripted failure is left to the first CreatePage, which gives it.
func (v *device) RefusePages(size, n uint64) error {
	if r, ok := v.p.(allocator.PageRefuser); ok && !v.failHere() {
		return r.RefusePages(size, n)
	}
	return nil
}

func (v *device) Map(addr uint64, h allocator.PageHandle) error {
	return v.p.Map(v.ranges.translate(addr), h)
}
func (v *device) SetAccess(addr, size uint64) error {
	return v.p.SetAccess(v.ranges.translate(addr), size)
}
func (v *device) Unmap(addr, size uint64) error              { return v.p.Unmap(v.ranges.translate(addr), size) }
func (v *device) Release(h allocator.PageHandle) error       { return v.p.Release(h) }
func (v *device) SynchronizeStream(s allocator.Stream) error { return v.p.SynchronizeStream(s) }

package realgpu

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/cuda"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
)

// AddressOffset is added to the driver's pointers before the replay sees
// them (see the package comment): device pointers lie far below it.
const AddressOffset = uint64(1) << 56

// CapacityDevice is the CapacitySource of a device given all of the GPU's
// memory (no Options.Capacity).
const CapacityDevice = "device memory"

// defaultGranularity accounts a cudaMalloc's bytes on a device without VMM
// (Granularity 0), as the simulator's default does.
const defaultGranularity = 2 << 20

// Process is one replayed device on the GPU: a replay.Process and
// replay.Describer over a *cuda.Device. Its methods are safe for concurrent
// use; each holds the Process's lock for the driver call, so calls run one
// at a time, as a replay makes them.
type Process struct {
	dev   *cuda.Device
	name  string
	limit uint64 // Options.Capacity; 0: none
	gran  uint64 // how a cudaMalloc's bytes are counted against limit

	mu     sync.Mutex
	closed bool
	held   uint64                          // bytes of segments and pages, as counted against limit
	segs   map[uint64]uint64               // real segment address -> bytes held
	pages  map[allocator.PageHandle]uint64 // page -> size
	resv   map[uint64]uint64               // real reservation base -> size
	mapped map[uint64]uint64               // real address of a mapped page -> its size

	// The replay's clock on the driver's events (package comment): events
	// by the id handed to the allocator, counting up from 1 like the
	// simulator's, so that ids never repeat even when the driver recycles
	// its handles.
	events map[allocator.Event]*event
	last   allocator.Event

	tally map[gpu.Call]gpu.Counter
}

// event is one recorded event: the trace's stream it stands for, the
// driver's event while the driver has not reported it complete (0 after),
// and whether the replay's clock has reached it.
type event struct {
	stream allocator.Stream
	real   allocator.Event
	done   bool
}

var (
	_ replay.Process   = (*Process)(nil)
	_ replay.Describer = (*Process)(nil)
)

func newProcess(dev *cuda.Device, name string, limit uint64) *Process {
	g := dev.Granularity()
	if g == 0 {
		g = defaultGranularity
	}
	return &Process{dev: dev, name: name, limit: limit, gran: g,
		segs: map[uint64]uint64{}, pages: map[allocator.PageHandle]uint64{},
		resv: map[uint64]uint64{}, mapped: map[uint64]uint64{},
		events: map[allocator.Event]*event{}, tally: map[gpu.Call]gpu.Counter{}}
}

// errClosed is a call after Close.
var errClosed = errors.New("realgpu: the process is closed")

// Device returns the CUDA device the process runs on.
func (p *Process) Device() *cuda.Device { return p.dev }

// Info implements replay.Describer.
func (p *Process) Info() replay.ProcessInfo {
	info := replay.ProcessInfo{Name: p.name, Capacity: p.dev.TotalMem(), CapacitySource: CapacityDevice, MeasuredTime: true}
	if p.limit > 0 {
		info.Capacity, info.CapacitySource = p.limit, "option"
	}
	return info
}

// Counters returns the calls made so far with their measured time. It
// stays readable after Close.
func (p *Process) Counters() gpu.Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := gpu.Counters{ByCall: make(map[gpu.Call]gpu.Counter, len(p.tally))}
	for k, v := range p.tally {
		out.ByCall[k] = v
		out.Total.Calls += v.Calls
		out.Total.Failures += v.Failures
		out.Total.Time += v.Time
	}
	return out
}

// Held returns the bytes of the segments and pages the process holds on
// the GPU (what Options.Capacity limits).
func (p *Process) Held() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// count adds one call of kind c that took d (and failed when err is set).
func (p *Process) count(c gpu.Call, d time.Duration, err error) {
	n := p.tally[c]
	n.Calls++
	n.Time += d
	if err != nil {
		n.Failures++
	}
	p.tally[c] = n
}

// timed runs f, the driver call of a call of kind c, and counts it with
// its wall time.
func (p *Process) timed(c gpu.Call, f func() error) error {
	start := time.Now()
	err := f()
	p.count(c, time.Since(start), err)
	return err
}

// devAddr turns an address the replay holds into the driver's. An address
// below the offset was never handed out; it goes to the driver as it is,
// which refuses it.
func devAddr(addr uint64) uint64 {
	if addr >= AddressOffset {
		return addr - AddressOffset
	}
	return addr
}

// shown turns a driver pointer into the address the replay sees.
func shown(addr uint64) (uint64, error) {
	if addr >= AddressOffset {
		return 0, fmt.Errorf("realgpu: device pointer %#x above 2^56, where the replay keeps its own addresses", addr)
	}
	return addr + AddressOffset, nil
}

// limited is the out-of-memory of a call that Options.Capacity refuses,
// in the driver's words.
func (p *Process) limited(call string, size uint64) error {
	return &allocator.DeviceError{Call: call, Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY",
		Msg: fmt.Sprintf("out of memory (%d bytes asked, %d of the replay's limit of %d held)", size, p.held, p.limit),
		OOM: true}
}

// fits says whether bytes more fit under the limit.
func (p *Process) fits(bytes uint64) bool {
	return p.limit == 0 || (bytes <= p.limit && bytes <= p.limit-p.held)
}

func alignUp(x, a uint64) uint64 {
	if r := x % a; r != 0 {
		return x + a - r
	}
	return x
}

// Malloc is cudaMalloc (cuMemAlloc_v2).
func (p *Process) Malloc(size uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errClosed
	}
	phys := alignUp(size, p.gran)
	if size > p.limit && p.limit > 0 {
		phys = size // no overflow in the rounding: it fails anyway
	}
	var a uint64
	err := p.timed(gpu.CallMalloc, func() (err error) {
		if !p.fits(phys) {
			return p.limited("cuMemAlloc_v2", size)
		}
		a, err = p.dev.Malloc(size)
		return err
	})
	if err != nil {
		return 0, err
	}
	addr, err := shown(a)
	if err != nil {
		_ = p.dev.Free(a)
		return 0, err
	}
	p.segs[a] = phys
	p.held += phys
	return addr, nil
}

// Free is cudaFree (cuMemFree_v2). It synchronises the device, so every
// event recorded so far is complete afterwards.
func (p *Process) Free(addr uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	a := devAddr(addr)
	if err := p.timed(gpu.CallFree, func() error { return p.dev.Free(a) }); err != nil {
		return err
	}
	p.count(gpu.CallDeviceSync, 0, nil)
	for _, e := range p.events {
		e.done = true
	}
	p.held -= p.segs[a]
	delete(p.segs, a)
	return nil
}

// MemGetInfo is cudaMemGetInfo (cuMemGetInfo_v2); with a limit, total is
// the limit and free at most what is left under it.
func (p *Process) MemGetInfo() (free, total uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, 0, errClosed
	}
	err = p.timed(gpu.CallMemGetInfo, func() (err error) {
		free, total, err = p.dev.MemGetInfo()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if p.limit > 0 {
		total = p.limit
		free = min(free, p.limit-min(p.held, p.limit))
	}
	return free, total, nil
}

// RecordEvent is cudaEventRecord, on the default stream (the trace's
// stream s is another process's pointer); the event stands for s.
func (p *Process) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errClosed
	}
	var ev allocator.Event
	err := p.timed(gpu.CallEventRecord, func() (err error) {
		ev, err = p.dev.RecordEvent(0)
		return err
	})
	if err != nil {
		return 0, err
	}
	p.last++
	p.events[p.last] = &event{stream: s, real: ev}
	return p.last, nil
}

// unknownEvent is the driver's answer to a handle it does not know.
func unknownEvent(call string, id allocator.Event) error {
	return &allocator.DeviceError{Call: call, Code: 400, Name: "CUDA_ERROR_INVALID_HANDLE",
		Msg: fmt.Sprintf("event %d is not outstanding", id)}
}

// QueryEvent is cudaEventQuery: complete when the driver and the replay's
// clock both say so. A completed event is forgotten.
func (p *Process) QueryEvent(id allocator.Event) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, errClosed
	}
	e := p.events[id]
	if e == nil {
		err := unknownEvent("cuEventQuery", id)
		p.count(gpu.CallEventQuery, 0, err)
		return false, err
	}
	if e.real == 0 {
		// The driver said so before; only the clock was missing.
		p.count(gpu.CallEventQuery, 0, nil)
	} else {
		var done bool
		err := p.timed(gpu.CallEventQuery, func() (err error) {
			done, err = p.dev.QueryEvent(e.real)
			return err
		})
		if err != nil {
			return false, err
		}
		if done {
			e.real = 0 // back in the device's pool
		}
	}
	if e.real != 0 || !e.done {
		return false, nil
	}
	delete(p.events, id)
	return true, nil
}

// SynchronizeEvent is cudaEventSynchronize: the event completes, with the
// events recorded before it on its stream, and is forgotten.
func (p *Process) SynchronizeEvent(id allocator.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	e := p.events[id]
	if e == nil {
		err := unknownEvent("cuEventSynchronize", id)
		p.count(gpu.CallEventSync, 0, err)
		return err
	}
	err := p.timed(gpu.CallEventSync, func() error {
		if e.real == 0 {
			return nil
		}
		return p.dev.SynchronizeEvent(e.real)
	})
	if err != nil {
		return err
	}
	e.real = 0
	p.complete(e.stream, id)
	delete(p.events, id)
	return nil
}

// complete marks the events of stream s up to id as reached by the clock.
func (p *Process) complete(s allocator.Stream, upTo allocator.Event) {
	for id, e := range p.events {
		if e.stream == s && id <= upTo {
			e.done = true
		}
	}
}

// SynchronizeStream is cudaStreamSynchronize, of the default stream: every
// event recorded on the trace's stream s so far completes.
func (p *Process) SynchronizeStream(s allocator.Stream) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.timed(gpu.CallStreamSync, func() error { return p.dev.SynchronizeStream(0) }); err != nil {
		return err
	}
	p.complete(s, p.last)
	return nil
}

// CompleteEvents is the replay's clock: the events recorded on the trace's
// stream s so far are complete. When the driver has not yet reported one of
// them complete, the default stream is synchronised so that it will (at
// once on an idle GPU; the fake driver's events complete only so). Not
// counted, and its error, if any, is the next call's: a failing
// synchronisation means a corrupted context, which every later call
// reports.
func (p *Process) CompleteEvents(s allocator.Stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	sync := false
	for _, e := range p.events {
		if e.stream == s {
			e.done = true
			sync = sync || e.real != 0
		}
	}
	if sync {
		_ = p.dev.SynchronizeStream(0)
	}
}

// Granularity is the device's VMM granularity (0 without VMM).
func (p *Process) Granularity() uint64 { return p.dev.Granularity() }

// ReserveAddress is cuMemAddressReserve.
func (p *Process) ReserveAddress(size uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errClosed
	}
	var a uint64
	err := p.timed(gpu.CallAddressReserve, func() (err error) {
		a, err = p.dev.ReserveAddress(size)
		return err
	})
	if err != nil {
		return 0, err
	}
	addr, err := shown(a)
	if err != nil {
		_ = p.dev.FreeAddress(a, size)
		return 0, err
	}
	p.resv[a] = size
	return addr, nil
}

// FreeAddress is cuMemAddressFree.
func (p *Process) FreeAddress(addr, size uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	a := devAddr(addr)
	if err := p.timed(gpu.CallAddressFree, func() error { return p.dev.FreeAddress(a, size) }); err != nil {
		return err
	}
	delete(p.resv, a)
	return nil
}

// CreatePage is cuMemCreate: size bytes of the GPU's memory.
func (p *Process) CreatePage(size uint64) (allocator.PageHandle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errClosed
	}
	var h allocator.PageHandle
	err := p.timed(gpu.CallCreatePage, func() (err error) {
		if !p.fits(size) {
			return p.limited("cuMemCreate", size)
		}
		h, err = p.dev.CreatePage(size)
		return err
	})
	if err != nil {
		return 0, err
	}
	p.pages[h] = size
	p.held += size
	return h, nil
}

// Map is cuMemMap of the page h at addr.
func (p *Process) Map(addr uint64, h allocator.PageHandle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	a := devAddr(addr)
	if err := p.timed(gpu.CallMap, func() error { return p.dev.Map(a, h) }); err != nil {
		return err
	}
	p.mapped[a] = p.pages[h]
	return nil
}

// SetAccess is cuMemSetAccess.
func (p *Process) SetAccess(addr, size uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	a := devAddr(addr)
	return p.timed(gpu.CallSetAccess, func() error { return p.dev.SetAccess(a, size) })
}

// Unmap is cuMemUnmap.
func (p *Process) Unmap(addr, size uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	a := devAddr(addr)
	if err := p.timed(gpu.CallUnmap, func() error { return p.dev.Unmap(a, size) }); err != nil {
		return err
	}
	if n, ok := p.mapped[a]; ok && n == size {
		delete(p.mapped, a) // the allocator unmaps page by page
		return nil
	}
	for m := range p.mapped {
		if m >= a && m < a+size {
			delete(p.mapped, m)
		}
	}
	return nil
}

// Release is cuMemRelease.
func (p *Process) Release(h allocator.PageHandle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.timed(gpu.CallRelease, func() error { return p.dev.Release(h) }); err != nil {
		return err
	}
	p.held -= p.pages[h]
	delete(p.pages, h)
	return nil
}

// Close ends the process: it waits for the events still outstanding,
// unmaps the pages still mapped, releases the pages, frees the reservations and the segments (whatever the replay left:
// its cache and the blocks live at the trace's end), then closes the CUDA
// device, which releases the primary context. Errors of a corrupted
// context are ignored (the context's release frees everything anyway);
// the first other error is returned. Counters stay readable; every other
// call fails from now on. A second Close does nothing.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var first error
	keep := func(err error) {
		var de *allocator.DeviceError
		if err != nil && first == nil && !(errors.As(err, &de) && de.Sticky) {
			first = err
		}
	}
	// Events the allocator never saw complete (blocks still waiting on
	// record_stream at the end) go back to the device's pool, which Close
	// destroys.
	ids := make([]uint64, 0, len(p.events))
	for id, e := range p.events {
		if e.real != 0 {
			ids = append(ids, uint64(id))
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		keep(p.dev.SynchronizeEvent(p.events[allocator.Event(id)].real))
	}
	for _, a := range sortedKeys(p.mapped) {
		keep(p.dev.Unmap(a, p.mapped[a]))
	}
	hs := make([]uint64, 0, len(p.pages))
	for h := range p.pages {
		hs = append(hs, uint64(h))
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	for _, h := range hs {
		keep(p.dev.Release(allocator.PageHandle(h)))
	}
	for _, a := range sortedKeys(p.resv) {
		keep(p.dev.FreeAddress(a, p.resv[a]))
	}
	for _, a := range sortedKeys(p.segs) {
		keep(p.dev.Free(a))
	}
	p.mapped, p.pages, p.resv, p.segs, p.events = nil, nil, nil, nil, nil
	p.held = 0
	keep(p.dev.Close())
	if first != nil {
		return fmt.Errorf("realgpu: closing %s: %w", p.name, first)
	}
	return nil
}

func sortedKeys(m map[uint64]uint64) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

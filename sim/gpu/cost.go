package gpu

import (
	"fmt"
	"time"
)

// Call names a kind of device call by the CUDA function it stands for. It is
// the key of Counters and the target of FailWith.
type Call string

// The device calls a Process counts. CallDeviceSync is not a call of its
// own: it is the device synchronisation inside every successful cudaFree,
// counted apart because it, not the free, is why freeing is expensive.
const (
	CallMalloc         Call = "cudaMalloc"
	CallFree           Call = "cudaFree"
	CallDeviceSync     Call = "cudaDeviceSynchronize"
	CallMemGetInfo     Call = "cudaMemGetInfo"
	CallEventRecord    Call = "cudaEventRecord"
	CallEventQuery     Call = "cudaEventQuery"
	CallEventSync      Call = "cudaEventSynchronize"
	CallStreamSync     Call = "cudaStreamSynchronize"
	CallAddressReserve Call = "cuMemAddressReserve"
	CallAddressFree    Call = "cuMemAddressFree"
	CallCreatePage     Call = "cuMemCreate"
	CallMap            Call = "cuMemMap"
	CallSetAccess      Call = "cuMemSetAccess"
	CallUnmap          Call = "cuMemUnmap"
	CallRelease        Call = "cuMemRelease"
)

// Calls lists every Call in a fixed order, for reports that print them all.
func Calls() []Call {
	return []Call{
		CallMalloc, CallFree, CallDeviceSync, CallMemGetInfo,
		CallEventRecord, CallEventQuery, CallEventSync, CallStreamSync,
		CallAddressReserve, CallAddressFree, CallCreatePage, CallMap,
		CallSetAccess, CallUnmap, CallRelease,
	}
}

// CostModel is the modelled latency of one call of each kind. The latency is
// the driver's own; a synchronisation's wait for queued kernels depends on
// the workload and is left out.
type CostModel struct {
	Malloc         time.Duration // cudaMalloc
	Free           time.Duration // cudaFree, excluding its device synchronisation
	DeviceSync     time.Duration // the device synchronisation cudaFree performs
	MemGetInfo     time.Duration // cudaMemGetInfo
	EventRecord    time.Duration // cudaEventRecord
	EventQuery     time.Duration // cudaEventQuery
	EventSync      time.Duration // cudaEventSynchronize
	StreamSync     time.Duration // cudaStreamSynchronize
	AddressReserve time.Duration // cuMemAddressReserve
	AddressFree    time.Duration // cuMemAddressFree
	CreatePage     time.Duration // cuMemCreate
	Map            time.Duration // cuMemMap
	SetAccess      time.Duration // cuMemSetAccess
	Unmap          time.Duration // cuMemUnmap
	Release        time.Duration // cuMemRelease
}

// DefaultCosts returns latencies from published measurements where there
// are any (../shared/docs/prior-art.md §4.3) and guesses, marked as such,
// where there are none.
//
// The VMM figures are kvcached's bench_vmm averages on an A100 (2 MiB pages,
// one thread, 4,096 pages; github.com/ovg-project/kvcached,
// benchmarks/bench_vmm/README.md). Its table has no cuMemRelease,
// cuMemAddressFree or runtime calls.
func DefaultCosts() CostModel {
	return CostModel{
		// Measured by the UVA overhead study (cs.virginia.edu/~mwb7w/
		// cuda_support/memory_management_overhead.html): ~50 µs for
		// 4 KiB-512 KiB, rising steeply above. PyTorch segments are 2 MiB
		// or more, so this is a lower bound; one figure per call is a guess.
		Malloc: 50 * time.Microsecond,
		// Guess. Cytnx PR #850 measured cudaMalloc + empty kernel + cudaFree
		// at ~14 µs in all on small buffers, which leaves a few µs for the
		// call itself.
		Free: 5 * time.Microsecond,
		// Guess: the fixed cost of draining an idle device. On a busy
		// trainer the wait for queued kernels dominates; see CostModel.
		DeviceSync: 10 * time.Microsecond,
		// Guess: a driver query with no device work.
		MemGetInfo: 2 * time.Microsecond,
		// Guess: enqueueing an event costs about what enqueueing a kernel
		// does (a few µs; PyTorch's whole op dispatch is ~8 µs, PR #82146).
		EventRecord: 2 * time.Microsecond,
		// Guess: a host-side status read.
		EventQuery: time.Microsecond,
		// Guesses: fixed overhead of a wait that finds the work done.
		EventSync:  5 * time.Microsecond,
		StreamSync: 5 * time.Microsecond,
		// kvcached: cuMemAddressReserve(8 GB) 19 µs.
		AddressReserve: 19 * time.Microsecond,
		// Guess: returning a range is bookkeeping of the same kind as
		// reserving it; kvcached's second machine reserved in 9 µs.
		AddressFree: 10 * time.Microsecond,
		// kvcached: cuMemCreate avg 193.32 µs (p50 195, p99 381).
		CreatePage: 193 * time.Microsecond,
		// kvcached: cuMemMap avg 1.45 µs.
		Map: 1450 * time.Nanosecond,
		// kvcached: cuMemSetAccess avg 35.99 µs (p99 54).
		SetAccess: 36 * time.Microsecond,
		// kvcached: cuMemUnmap avg 25.63 µs.
		Unmap: 25600 * time.Nanosecond,
		// Guess: not measured by kvcached. PyTorch pairs every cuMemUnmap
		// with a cuMemRelease of the same page, and both tear down driver
		// state for one page without touching its contents, so the unmap
		// figure is the best available; creation is dearer because the
		// driver must find and clear physical pages.
		Release: 25600 * time.Nanosecond,
	}
}

// Of returns the modelled latency of one call of kind c.
func (m CostModel) Of(c Call) time.Duration {
	switch c {
	case CallMalloc:
		return m.Malloc
	case CallFree:
		return m.Free
	case CallDeviceSync:
		return m.DeviceSync
	case CallMemGetInfo:
		return m.MemGetInfo
	case CallEventRecord:
		return m.EventRecord
	case CallEventQuery:
		return m.EventQuery
	case CallEventSync:
		return m.EventSync
	case CallStreamSync:
		return m.StreamSync
	case CallAddressReserve:
		return m.AddressReserve
	case CallAddressFree:
		return m.AddressFree
	case CallCreatePage:
		return m.CreatePage
	case CallMap:
		return m.Map
	case CallSetAccess:
		return m.SetAccess
	case CallUnmap:
		return m.Unmap
	case CallRelease:
		return m.Release
	}
	return 0
}

func (m CostModel) validate() error {
	for _, c := range Calls() {
		if m.Of(c) < 0 {
			return fmt.Errorf("sim: negative cost %v for %s", m.Of(c), c)
		}
	}
	return nil
}

// Counter is the tally of one kind of call.
type Counter struct {
	Calls    uint64        // calls made, failed ones included
	Failures uint64        // calls that returned an error
	Time     time.Duration // modelled time spent in them
}

func (c *Counter) add(o Counter) {
	c.Calls += o.Calls
	c.Failures += o.Failures
	c.Time += o.Time
}

// Counters tallies device calls per kind. Total sums every kind, the
// implicit device synchronisations of cudaFree included.
type Counters struct {
	ByCall map[Call]Counter
	Total  Counter
}

// Get returns the tally for call, zero if there were none.
func (c Counters) Get(call Call) Counter { return c.ByCall[call] }

// Add adds o's tallies to c.
func (c *Counters) Add(o Counters) {
	if c.ByCall == nil {
		c.ByCall = make(map[Call]Counter, len(o.ByCall))
	}
	for k, v := range o.ByCall {
		n := c.ByCall[k]
		n.add(v)
		c.ByCall[k] = n
	}
	c.Total.add(o.Total)
}

// Sub removes o's tallies from c: what happened since o was taken, when o
// is an earlier snapshot of the same process.
func (c *Counters) Sub(o Counters) {
	for k, v := range o.ByCall {
		n := c.ByCall[k]
		n.Calls -= v.Calls
		n.Failures -= v.Failures
		n.Time -= v.Time
		if n == (Counter{}) {
			delete(c.ByCall, k)
		} else {
			c.ByCall[k] = n
		}
	}
	c.Total.Calls -= o.Total.Calls
	c.Total.Failures -= o.Total.Failures
	c.Total.Time -= o.Total.Time
}

// tally is a process's running Counters: a map of values rather than a
// fixed array so that Counters can hand out a copy without knowing the
// kinds, and the running sum of every kind, which a caller that asks after
// every few calls (sim/workers, for the modelled call time) gets without
// the map's copy.
type tally struct {
	by    map[Call]Counter
	total Counter
}

func (t *tally) charge(c Call, d time.Duration) {
	n := t.by[c]
	n.Calls++
	n.Time += d
	t.by[c] = n
	t.total.Calls++
	t.total.Time += d
}

// chargeN adds n calls of kind c, each taking d.
func (t *tally) chargeN(c Call, n uint64, d time.Duration) {
	if n == 0 {
		return
	}
	k := t.by[c]
	k.Calls += n
	k.Time += time.Duration(n) * d
	t.by[c] = k
	t.total.Calls += n
	t.total.Time += time.Duration(n) * d
}

func (t *tally) fail(c Call) {
	n := t.by[c]
	n.Failures++
	t.by[c] = n
	t.total.Failures++
}

func (t *tally) snapshot() Counters {
	out := Counters{ByCall: make(map[Call]Counter, len(t.by))}
	for k, v := range t.by {
		out.ByCall[k] = v
	}
	out.Total = t.total
	return out
}

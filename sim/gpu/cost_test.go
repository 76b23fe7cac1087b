package gpu_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/gpu"
)

// binaryCosts gives every kind a distinct power of two nanoseconds, so any
// miscount shows in the total.
func binaryCosts() gpu.CostModel {
	return gpu.CostModel{
		Malloc: 1, Free: 2, DeviceSync: 4, MemGetInfo: 8,
		EventRecord: 16, EventQuery: 32, EventSync: 64, StreamSync: 128,
		AddressReserve: 256, AddressFree: 512, CreatePage: 1024, Map: 2048,
		SetAccess: 4096, Unmap: 8192, Release: 16384,
	}
}

func TestCostCountersForAKnownSequence(t *testing.T) {
	costs := binaryCosts()
	g := newGPU(t, 100*miB, func(o *gpu.Options) { o.Costs = costs })
	p := newProcess(t, g)

	seg, err := p.Malloc(20 * miB)
	require.NoError(t, err)
	_, err = p.Malloc(200 * miB) // fails: charged, no effect
	require.Error(t, err)
	require.NoError(t, p.Free(seg))
	require.Error(t, p.Free(seg)) // fails before the sync: no DeviceSync
	_, _, err = p.MemGetInfo()
	require.NoError(t, err)
	e := record(t, p, 1)
	query(t, p, e)
	require.NoError(t, p.SynchronizeEvent(e))
	require.NoError(t, p.SynchronizeStream(1))
	va, err := p.ReserveAddress(20 * miB)
	require.NoError(t, err)
	h, err := p.CreatePage(20 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Map(va, h))
	require.NoError(t, p.SetAccess(va, 20*miB))
	require.NoError(t, p.Unmap(va, 20*miB))
	require.NoError(t, p.Release(h))
	require.NoError(t, p.FreeAddress(va, 20*miB))

	c := p.Counters()
	assert.Equal(t, gpu.Counter{Calls: 2, Failures: 1, Time: 2}, c.Get(gpu.CallMalloc))
	assert.Equal(t, gpu.Counter{Calls: 2, Failures: 1, Time: 4}, c.Get(gpu.CallFree))
	assert.Equal(t, gpu.Counter{Calls: 1, Time: 4}, c.Get(gpu.CallDeviceSync))
	var want time.Duration
	for _, call := range gpu.Calls() {
		switch call {
		case gpu.CallMalloc, gpu.CallFree:
			want += 2 * costs.Of(call)
		default:
			want += costs.Of(call)
			assert.Equal(t, gpu.Counter{Calls: 1, Time: costs.Of(call)}, c.Get(call), call)
		}
	}
	assert.Equal(t, gpu.Counter{Calls: 17, Failures: 2, Time: want}, c.Total)
	assert.Equal(t, c.Total, p.Total(), "Total is Counters' Total")
	assert.Equal(t, time.Duration(1+2+4+8+16+32+64+128+256+512+1024+2048+4096+8192+16384)+1+2, want)

	// The GPU's tally sums its processes, closed ones included.
	q := newProcess(t, g)
	_, err = q.Malloc(2 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	_, err = p.Malloc(2 * miB) // a closed process makes no calls
	require.Error(t, err)
	gc := g.Counters()
	assert.Equal(t, gpu.Counter{Calls: 3, Failures: 1, Time: 3}, gc.Get(gpu.CallMalloc))
	assert.Equal(t, want+1, gc.Total.Time)
	assert.Equal(t, uint64(18), gc.Total.Calls)
}

func TestCostCountersChargeFaultsAndStickyCalls(t *testing.T) {
	g := newGPU(t, giB, func(o *gpu.Options) { o.Costs = binaryCosts() })
	p := newProcess(t, g)
	p.FailMalloc(1)
	_, err := p.Malloc(2 * miB)
	require.Error(t, err)
	p.InjectStickyError("")
	_, err = p.Malloc(2 * miB)
	require.Error(t, err)
	assert.Equal(t, gpu.Counter{Calls: 2, Failures: 2, Time: 2}, p.Counters().Get(gpu.CallMalloc))
	assert.Equal(t, gpu.Counter{Calls: 2, Failures: 2, Time: 2}, p.Total())
}

// TestTotalCountsRefusedPages checks the running total where RefusePages
// charges a batch of calls at once.
func TestTotalCountsRefusedPages(t *testing.T) {
	g := newGPU(t, 8*miB, func(o *gpu.Options) { o.Costs = binaryCosts() })
	p := newProcess(t, g)
	require.Error(t, p.RefusePages(2*miB, 100)) // four pages fit, the fifth fails
	c := p.Counters()
	require.NotZero(t, c.Get(gpu.CallCreatePage).Failures)
	var sum gpu.Counter
	for _, call := range gpu.Calls() {
		k := c.Get(call)
		sum.Calls += k.Calls
		sum.Failures += k.Failures
		sum.Time += k.Time
	}
	assert.Equal(t, sum, c.Total)
	assert.Equal(t, sum, p.Total())
}

// TestDefaultCostsMatchPriorArt pins the published figures and the sums
// reports rely on.
func TestDefaultCostsMatchPriorArt(t *testing.T) {
	c := gpu.DefaultCosts()
	assert.Equal(t, 193*time.Microsecond, c.CreatePage)
	assert.Equal(t, 1450*time.Nanosecond, c.Map)
	assert.Equal(t, 36*time.Microsecond, c.SetAccess)
	assert.Equal(t, 25600*time.Nanosecond, c.Unmap)
	assert.Equal(t, 19*time.Microsecond, c.AddressReserve)
	for _, call := range gpu.Calls() {
		assert.Positive(t, c.Of(call), call)
	}

	// Mapping a fresh 2 MiB page costs about 230 µs (prior-art §4.3).
	g := newGPU(t, giB)
	p := newProcess(t, g)
	va, err := p.ReserveAddress(2 * miB)
	require.NoError(t, err)
	before := p.Counters().Total.Time
	h, err := p.CreatePage(2 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Map(va, h))
	require.NoError(t, p.SetAccess(va, 2*miB))
	assert.Equal(t, 230450*time.Nanosecond, p.Counters().Total.Time-before)

	// An uncached cudaMalloc/cudaFree pair pays the device sync too.
	before = p.Counters().Total.Time
	seg, err := p.Malloc(2 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Free(seg))
	assert.Equal(t, c.Malloc+c.Free+c.DeviceSync, p.Counters().Total.Time-before)
}

func TestCountersAdd(t *testing.T) {
	var sum gpu.Counters
	a := gpu.Counters{ByCall: map[gpu.Call]gpu.Counter{gpu.CallMalloc: {Calls: 1, Time: 5}}, Total: gpu.Counter{Calls: 1, Time: 5}}
	b := gpu.Counters{ByCall: map[gpu.Call]gpu.Counter{gpu.CallMalloc: {Calls: 2, Failures: 1, Time: 7}, gpu.CallFree: {Calls: 1, Time: 1}}, Total: gpu.Counter{Calls: 3, Failures: 1, Time: 8}}
	sum.Add(a)
	sum.Add(b)
	assert.Equal(t, gpu.Counter{Calls: 3, Failures: 1, Time: 12}, sum.Get(gpu.CallMalloc))
	assert.Equal(t, gpu.Counter{Calls: 1, Time: 1}, sum.Get(gpu.CallFree))
	assert.Equal(t, gpu.Counter{Calls: 4, Failures: 1, Time: 13}, sum.Total)
	assert.Equal(t, gpu.Counter{Calls: 1, Time: 5}, a.Get(gpu.CallMalloc), "Add does not touch its argument")
}

func TestCountersSub(t *testing.T) {
	g, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
	require.NoError(t, err)
	p, err := g.NewProcess()
	require.NoError(t, err)
	_, err = p.Malloc(1 << 20)
	require.NoError(t, err)
	before := p.Counters()
	a, err := p.Malloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	since := p.Counters()
	since.Sub(before)
	require.EqualValues(t, 1, since.Get(gpu.CallMalloc).Calls)
	require.EqualValues(t, 1, since.Get(gpu.CallFree).Calls)
	require.Equal(t, g.Costs().Of(gpu.CallMalloc), since.Get(gpu.CallMalloc).Time)
	require.Equal(t, since.Get(gpu.CallMalloc).Time+since.Get(gpu.CallFree).Time+since.Get(gpu.CallDeviceSync).Time, since.Total.Time)
}

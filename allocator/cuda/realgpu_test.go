package cuda

// Tests on the real driver and a real GPU, enabled by MEMREPLAY_REAL_GPU=1
// (bench/gpu-check.sh sets it); everywhere else they skip. The driver is
// libcuda.so.1, or MEMREPLAY_LIBCUDA. Device memory is not host memory
// here, so these tests never dereference a device pointer: they check the
// calls, the error mapping and the allocator's invariants on the device.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
)

func realDevice(t *testing.T) *Device {
	t.Helper()
	if os.Getenv("MEMREPLAY_REAL_GPU") != "1" {
		t.Skip("set MEMREPLAY_REAL_GPU=1 to run on the real driver (bench/gpu-check.sh)")
	}
	drv, err := Open()
	require.NoError(t, err)
	v, err := drv.Version()
	require.NoError(t, err)
	d, err := drv.Device(0)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	t.Logf("driver %s, CUDA %d.%d; %s, %d MiB, VMM granularity %d", drv.Path(), v/1000, v%1000/10, d.Name(), d.TotalMem()>>20, d.Granularity())
	return d
}

func TestRealGPUBasics(t *testing.T) {
	d := realDevice(t)
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, d.TotalMem(), total)
	assert.LessOrEqual(t, free, total)

	p, err := d.Malloc(20 << 20)
	require.NoError(t, err)
	free2, _, err := d.MemGetInfo()
	require.NoError(t, err)
	assert.Less(t, free2, free, "a 20 MiB allocation shows in cuMemGetInfo")
	require.NoError(t, d.Free(p))

	_, err = d.Malloc(total * 2)
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	assert.Contains(t, err.Error(), "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)")
	// An out-of-memory is not sticky: the device still works.
	p, err = d.Malloc(2 << 20)
	require.NoError(t, err)
	require.NoError(t, d.Free(p))

	err = d.Free(0xdead0000)
	require.Error(t, err)
	assert.NotErrorIs(t, err, allocator.ErrFatal)
	t.Logf("freeing a bad pointer: %v", err)

	e, err := d.RecordEvent(0)
	require.NoError(t, err)
	require.NoError(t, d.SynchronizeEvent(e))
	e, err = d.RecordEvent(0)
	require.NoError(t, err)
	require.NoError(t, d.Synchronize())
	done, err := d.QueryEvent(e)
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, d.SynchronizeStream(0))
}

func TestRealGPUVirtualMemory(t *testing.T) {
	d := realDevice(t)
	if !d.SupportsVMM() {
		t.Skip("the device has no virtual memory management")
	}
	g := d.Granularity()
	page := max(g, 2<<20)
	r, err := d.ReserveAddress(4 * page)
	require.NoError(t, err)
	var hs []allocator.PageHandle
	for i := uint64(0); i < 4; i++ {
		h, err := d.CreatePage(page)
		require.NoError(t, err)
		require.NoError(t, d.Map(r+i*page, h))
		hs = append(hs, h)
	}
	require.NoError(t, d.SetAccess(r, 4*page))
	require.NoError(t, d.SynchronizeStream(0))
	require.NoError(t, d.Unmap(r, 4*page))
	for _, h := range hs {
		require.NoError(t, d.Release(h))
	}
	require.NoError(t, d.FreeAddress(r, 4*page))
}

// The allocator's random sequences on the real device, with its invariant
// checks, both kinds of segment, from several goroutines (so several OS
// threads make driver calls).
func TestRealGPUAllocator(t *testing.T) {
	d := realDevice(t)
	for _, conf := range []string{"", "expandable_segments:True", "max_split_size_mb:40,garbage_collection_threshold:0.6"} {
		name := conf
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			if conf == "expandable_segments:True" && !d.SupportsVMM() {
				t.Skip("no VMM")
			}
			cfg, err := config.Parse(conf)
			require.NoError(t, err)
			a, err := allocator.New(d, cfg, allocator.WithInvariantChecks())
			require.NoError(t, err)
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 7))
					var live []*allocator.Block
					for i := 0; i < 2000; i++ {
						if len(live) > 0 && r.IntN(2) == 0 {
							j := r.IntN(len(live))
							if !assert.NoError(t, a.Free(live[j])) {
								return
							}
							live = append(live[:j], live[j+1:]...)
							continue
						}
						// Streams 0, 1 and 2 are valid CUstream values on a
						// real driver: default, legacy, per-thread.
						b, err := a.Malloc(randomSize(r), allocator.Stream(r.IntN(3)))
						if !assert.NoError(t, err, "step %d", i) {
							return
						}
						live = append(live, b)
					}
					for _, b := range live {
						assert.NoError(t, a.Free(b))
					}
				}(g)
			}
			wg.Wait()
			require.NoError(t, a.EmptyCache())
			st := a.Stats()
			t.Logf("%s: %d device allocs, peak reserved %d MiB", conf, st.NumDeviceAlloc, st.ReservedBytes[allocator.StatAll].Peak>>20)
			assert.Zero(t, st.AllocatedBytes[allocator.StatAll].Current)
		})
	}
}

// BenchmarkRealMallocFree is cuMemAlloc_v2 + cuMemFree_v2 of 2 MiB on the
// real device, for comparison with the fake's figure.
func BenchmarkRealMallocFree(b *testing.B) {
	if os.Getenv("MEMREPLAY_REAL_GPU") != "1" {
		b.Skip("set MEMREPLAY_REAL_GPU=1")
	}
	drv, err := Open()
	if err != nil {
		b.Fatal(err)
	}
	d, err := drv.Device(0)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for _, size := range []uint64{2 << 20, 20 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			for b.Loop() {
				p, err := d.Malloc(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Free(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("MemGetInfo", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := d.MemGetInfo(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

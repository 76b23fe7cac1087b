package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
)

const miB = 1 << 20

func TestOpcodesMatchShim(t *testing.T) {
	if !cgoEnabled {
		t.Skip("built without cgo")
	}
	want := []int{opInit, opDriverVersion, opDeviceCount, opDeviceGet, opTotalMem, opAttribute,
		opPrimaryRetain, opPrimaryRelease, opCtxSync, opMalloc, opFree, opMemInfo, opGranularity,
		opReserve, opAddressFree, opCreate, opMap, opSetAccess, opUnmap, opRelease, opEventCreate,
		opEventRecord, opEventQuery, opEventSync, opEventDestroy, opStreamSync, opLast,
		stepGetCurrent, stepSetCurrent, stepCall}
	require.Equal(t, want, shimOpcodes())
	for op := opInit; op < opLast; op++ {
		assert.NotEmpty(t, opCalls[op], "op %d has no call name", op)
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := Open(WithLibrary(missing))
	require.Error(t, err)
	if !cgoEnabled {
		require.ErrorIs(t, err, ErrNoCgo)
		return
	}
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), missing)
	assert.Contains(t, err.Error(), "cannot open shared object file")
	assert.Contains(t, err.Error(), LibraryEnv)

	// A library that is not a CUDA driver: the missing symbol is named.
	notCUDA := filepath.Join(t.TempDir(), "libnotcuda.so")
	require.NoError(t, os.Symlink("/lib/x86_64-linux-gnu/libm.so.6", notCUDA))
	if _, err := os.Stat(notCUDA); err == nil {
		_, err = Open(WithLibrary(notCUDA))
		require.ErrorIs(t, err, ErrNoDriver)
		assert.Contains(t, err.Error(), "symbol cuInit not found")
	}
}

func TestOpenUsesEnvironment(t *testing.T) {
	t.Setenv(LibraryEnv, filepath.Join(t.TempDir(), "nowhere.so"))
	_, err := Open()
	require.Error(t, err)
	if cgoEnabled {
		assert.Contains(t, err.Error(), "nowhere.so")
	}
}

func TestNoGPU(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	t.Setenv("FAKECUDA_DEVICES", "0")
	_, err := Open(WithLibrary(fakeLib))
	require.ErrorIs(t, err, ErrNoDevice)
	assert.Contains(t, err.Error(), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)")
	t.Setenv("FAKECUDA_DEVICES", "1")
	_, err = f.drv.Device(1)
	require.ErrorIs(t, err, ErrNoDevice)
	assert.Contains(t, err.Error(), "ordinal 1, the driver sees 1 GPU(s)")
}

func TestDeviceInfo(t *testing.T) {
	f := needFake(t, 3<<30, 0, 0)
	v, err := f.drv.Version()
	require.NoError(t, err)
	assert.Equal(t, 12080, v)
	n, err := f.drv.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	d := f.device()
	assert.Equal(t, "memreplay fake GPU", d.Name())
	assert.Equal(t, uint64(3<<30), d.TotalMem())
	assert.Equal(t, uint64(2*miB), d.Granularity())
	assert.True(t, d.SupportsVMM())
	assert.Equal(t, 0, d.Ordinal())
}

func TestMallocFreeMemGetInfo(t *testing.T) {
	f := needFake(t, 1<<30, 0, 100*miB)
	d := f.device()
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<30), total)
	assert.Equal(t, uint64(1<<30-100*miB), free, "the context's overhead is charged")

	p, err := d.Malloc(20 * miB)
	require.NoError(t, err)
	assert.Zero(t, p%(2*miB))
	// The fake's device pointers are host memory: write and read it.
	b := hostBytes(p, 20*miB)
	b[0], b[len(b)-1] = 0xa5, 0x5a
	assert.Equal(t, byte(0xa5), b[0])
	free, _, err = d.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<30-120*miB), free)
	require.NoError(t, d.Free(p))
	assert.Equal(t, uint64(100*miB), f.stat("used"))

	err = d.Free(p)
	var de *allocator.DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "cuMemFree_v2 failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument", err.Error())
}

func TestErrorNaming(t *testing.T) {
	f := needFake(t, 64*miB, 0, 0)
	d := f.device()
	_, err := d.Malloc(128 * miB)
	require.Error(t, err)
	assert.Equal(t, "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", err.Error())
	assert.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	assert.NotErrorIs(t, err, allocator.ErrFatal)

	// A code the driver has no name for still gives a readable error.
	f.fail("cuMemCreate", 1, 12345)
	_, err = d.CreatePage(2 * miB)
	assert.EqualError(t, err, "cuMemCreate failed: CUresult 12345 (12345)")

	f.fail("cuStreamSynchronize", 1, 400)
	err = d.SynchronizeStream(7)
	assert.EqualError(t, err, "cuStreamSynchronize failed: CUDA_ERROR_INVALID_HANDLE (400): invalid resource handle")
}

func TestStickyErrorIsFatal(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	a, err := allocator.New(d, config.Default())
	require.NoError(t, err)
	b, err := a.Malloc(5*miB, 0)
	require.NoError(t, err)
	f.sticky(700, 0)
	_, err = a.Malloc(30*miB, 0) // needs a new segment: the call fails
	require.ErrorIs(t, err, allocator.ErrFatal)
	assert.Contains(t, err.Error(), "cuMemAlloc_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered")
	// The allocator refuses all work from now on, cached blocks included.
	_, err = a.Malloc(1*miB, 0)
	require.ErrorIs(t, err, allocator.ErrFatal)
	require.ErrorIs(t, a.Free(b), allocator.ErrFatal)
	// Every later driver call reports the corruption under its own name.
	_, _, err = d.MemGetInfo()
	assert.ErrorIs(t, err, allocator.ErrFatal)
	assert.Contains(t, err.Error(), "cuMemGetInfo_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS")
	for _, code := range []int{226, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911} {
		assert.True(t, IsStickyCode(code), "%d", code)
	}
	assert.False(t, IsStickyCode(2))
	assert.False(t, IsStickyCode(600))
	// Close still releases the context, which the driver then destroys.
	require.NoError(t, d.Close())
	assert.Zero(t, f.stat("live"))
}

func TestStickyErrorFromFault(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	f.fail("cuMemCreate", 2, 710)
	_, err := d.CreatePage(2 * miB)
	require.NoError(t, err)
	_, err = d.CreatePage(2 * miB)
	require.ErrorIs(t, err, allocator.ErrFatal)
	assert.Contains(t, err.Error(), "CUDA_ERROR_ASSERT (710): device-side assert triggered [sticky")
	_, err = d.Malloc(2 * miB)
	assert.ErrorIs(t, err, allocator.ErrFatal)
}

// An out-of-memory from the driver runs the allocator's fallback chain:
// the cached segment is freed and the counted retry succeeds.
func TestOOMRetry(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	a, err := allocator.New(d, config.Default())
	require.NoError(t, err)
	b, err := a.Malloc(5*miB, 0)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
	f.fail("cuMemAlloc_v2", 1, 2)
	b, err = a.Malloc(30*miB, 0)
	require.NoError(t, err)
	st := a.Stats()
	assert.Equal(t, int64(1), st.NumAllocRetries)
	assert.Equal(t, int64(0), st.NumOOMs)
	assert.Equal(t, int64(3), f.count("cuMemAlloc_v2"), "first segment, the failed one, the retry")
	assert.Equal(t, int64(1), f.count("cuMemFree_v2"), "the cached segment went back before the retry")
	require.NoError(t, a.Free(b))

	// A real shortage: the whole chain runs, then OutOfMemoryError with the
	// driver's free memory in it.
	_, err = a.Malloc(2<<30, 0)
	var oom *allocator.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, uint64(1<<30), oom.DeviceTotal)
	assert.Equal(t, int64(1), a.Stats().NumOOMs)
}

// The context is current on whatever thread makes the call, even when
// something else cleared it there.
func TestContextFollowsThreads(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f.clearCurrent()
	p, err := d.Malloc(2 * miB)
	require.NoError(t, err)
	require.NoError(t, d.Free(p))

	// Many goroutines on fresh threads: each first call finds no context.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a thread of its own, exiting with the goroutine
			for j := 0; j < 50; j++ {
				p, err := d.Malloc(2 * miB)
				if err != nil {
					errs <- err
					return
				}
				*(*uint64)(hostPtr(p)) = uint64(j)
				if err := d.Free(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Zero(t, f.stat("live"))
}

// Expandable segments on the fake: the pages are real shared memory, so a
// pattern written through the segment's mapping is read back through a
// second mapping of the same page, and unmapping really takes it away.
func TestExpandableSegmentsMapRealMemory(t *testing.T) {
	f := needFake(t, 200*miB, 0, 0)
	d := f.device()
	cfg, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	a, err := allocator.New(d, cfg, allocator.WithInvariantChecks())
	require.NoError(t, err)

	b1, err := a.Malloc(5*miB, 0)
	require.NoError(t, err)
	b2, err := a.Malloc(30*miB, 0)
	require.NoError(t, err)
	assert.Equal(t, b1.Addr()+5*miB, b2.Addr(), "the segment grows in place")
	assert.Equal(t, int64(2), f.count("cuMemCreate"), "one 20 MiB page each")
	for _, b := range []*allocator.Block{b1, b2} {
		fill(b.Addr(), b.Size(), byte(b.Size()>>20))
	}
	for _, b := range []*allocator.Block{b1, b2} {
		require.True(t, check(b.Addr(), b.Size(), byte(b.Size()>>20)), "block %#x", b.Addr())
	}

	// A second view of one page: map it again elsewhere in a reservation of
	// our own and read what the allocator's block wrote through the first.
	r, err := d.ReserveAddress(2 * miB)
	require.NoError(t, err)
	h, err := d.CreatePage(2 * miB)
	require.NoError(t, err)
	require.NoError(t, d.Map(r, h))
	require.NoError(t, d.SetAccess(r, 2*miB))
	fill(r, 2*miB, 0x3c)
	require.True(t, check(r, 2*miB, 0x3c))
	require.NoError(t, d.Unmap(r, 2*miB))
	// Mapped again (at the same place, the only one reserved), the page
	// still holds the pattern: the memory is the page's, not the address's.
	require.NoError(t, d.Map(r, h))
	require.NoError(t, d.SetAccess(r, 2*miB))
	require.True(t, check(r, 2*miB, 0x3c))
	require.NoError(t, d.Unmap(r, 2*miB))
	require.NoError(t, d.Release(h))
	require.NoError(t, d.FreeAddress(r, 2*miB))

	// Free and empty the cache: the allocator unmaps and releases every
	// page, and returns the empty segment's reservation.
	require.NoError(t, a.Free(b1))
	require.NoError(t, a.Free(b2))
	require.NoError(t, a.EmptyCache())
	assert.Zero(t, f.stat("used"))
	assert.Equal(t, f.count("cuMemCreate"), f.count("cuMemRelease"))
	assert.Zero(t, f.stat("live"))

	// The fake refuses what the driver would: mapping into no reservation.
	h, err = d.CreatePage(2 * miB)
	require.NoError(t, err)
	err = d.Map(r, h)
	assert.EqualError(t, err, "cuMemMap failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument")
	require.NoError(t, d.Release(h))
	err = d.Map(0x1000, h)
	assert.ErrorContains(t, err, "was not created by device 0")
}

// hostPtr turns a fake device pointer, which is a host address, into a Go
// pointer. It reinterprets the integer's bytes rather than converting a
// uintptr, the pattern vet and checkptr reserve for Go memory.
func hostPtr(addr uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// hostBytes is the host memory behind a fake device pointer.
func hostBytes(addr, size uint64) []byte { return unsafe.Slice((*byte)(hostPtr(addr)), size) }

func fill(addr, size uint64, v byte) {
	b := hostBytes(addr, size)
	for i := range b {
		b[i] = v + byte(i>>12)
	}
}

func check(addr, size uint64, v byte) bool {
	b := hostBytes(addr, size)
	for i := range b {
		if b[i] != v+byte(i>>12) {
			return false
		}
	}
	return true
}

func TestEvents(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	e1, err := d.RecordEvent(3)
	require.NoError(t, err)
	e2, err := d.RecordEvent(3)
	require.NoError(t, err)
	e3, err := d.RecordEvent(4)
	require.NoError(t, err)
	done, err := d.QueryEvent(e1)
	require.NoError(t, err)
	assert.False(t, done)
	// Waiting for e2 completes e1 before it on stream 3, not e3.
	require.NoError(t, d.SynchronizeEvent(e2))
	done, err = d.QueryEvent(e1)
	require.NoError(t, err)
	assert.True(t, done)
	done, err = d.QueryEvent(e3)
	require.NoError(t, err)
	assert.False(t, done)
	require.NoError(t, d.SynchronizeStream(4))
	done, err = d.QueryEvent(e3)
	require.NoError(t, err)
	assert.True(t, done)
	// The completed events are reused: no new cuEventCreate.
	for i := 0; i < 10; i++ {
		e, err := d.RecordEvent(5)
		require.NoError(t, err)
		f.completeStream(5)
		done, err := d.QueryEvent(e)
		require.NoError(t, err)
		require.True(t, done)
	}
	assert.Equal(t, int64(3), f.count("cuEventCreate"))
	require.NoError(t, d.Synchronize())
	require.NoError(t, d.Close())
	assert.Equal(t, int64(3), f.count("cuEventDestroy_v2"))
}

func TestClosedDevice(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	require.NoError(t, d.Close())
	_, err := d.Malloc(2 * miB)
	require.ErrorIs(t, err, ErrClosed)
	assert.EqualError(t, err, "cuMemAlloc_v2 on device 0: cuda: device is closed")
	_, err = d.QueryEvent(1)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, d.Close(), ErrClosed)
	assert.False(t, errors.Is(err, allocator.ErrFatal))
}

// The allocator on the cuda device from many goroutines; run with -race.
func TestConcurrentAllocator(t *testing.T) {
	f := needFake(t, 1<<30, 0, 0)
	d := f.device()
	for _, conf := range []string{"", "expandable_segments:True"} {
		cfg, err := config.Parse(conf)
		require.NoError(t, err)
		a, err := allocator.New(d, cfg)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					size := uint64(1+(g*7+i*13)%40) * miB / 4
					b, err := a.Malloc(size, allocator.Stream(g%2))
					if !assert.NoError(t, err) {
						return
					}
					*(*uint64)(hostPtr(b.Addr())) = uint64(g)
					assert.NoError(t, a.Free(b))
				}
			}(g)
		}
		wg.Wait()
		require.NoError(t, a.EmptyCache())
	}
}

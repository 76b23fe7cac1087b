package cuda

import (
	"fmt"
	"sync"

	"github.com/memreplay/memreplay/allocator"
)

// Device is one GPU with its primary context retained: an
// allocator.Device and allocator.VirtualMemory. Its methods are safe for
// concurrent use (the driver's calls are thread-safe; the Device's own
// bookkeeping is locked).
type Device struct {
	lib     *lib
	ordinal int
	dev     int     // the CUdevice handle
	ctx     uintptr // the primary CUcontext
	name    string
	total   uint64
	gran    uint64 // VMM granularity; 0 when the device has no VMM

	// life guards closed: every call holds it shared, Close exclusively,
	// so Close never releases the context under a running call.
	life   sync.RWMutex
	closed bool

	mu    sync.Mutex
	pages map[allocator.PageHandle]uint64 // cuMemCreate handle -> size
	pool  []allocator.Event               // idle events, ready to record
}

var (
	_ allocator.Device        = (*Device)(nil)
	_ allocator.VirtualMemory = (*Device)(nil)
)

// Device opens GPU ordinal (as CUDA_VISIBLE_DEVICES numbers them) and
// retains its primary context.
func (d *Driver) Device(ordinal int) (*Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: ordinal %d, the driver sees %d GPU(s)", ErrNoDevice, ordinal, n)
	}
	l := d.lib
	dev, _, rc, step := l.do(0, opDeviceGet, uint64(ordinal), 0, 0)
	if rc != 0 {
		return nil, l.deviceError(opDeviceGet, rc, step)
	}
	g := &Device{lib: l, ordinal: ordinal, dev: int(dev), pages: map[allocator.PageHandle]uint64{}}
	if name, rc := l.deviceName(g.dev); rc != 0 {
		return nil, withCall(l.deviceError(0, rc, stepCall), "cuDeviceGetName")
	} else {
		g.name = name
	}
	if g.total, _, rc, step = l.do(0, opTotalMem, dev, 0, 0); rc != 0 {
		return nil, l.deviceError(opTotalMem, rc, step)
	}
	vmm, _, rc, step := l.do(0, opAttribute, dev, vmmAttribute, 0)
	if rc != 0 {
		return nil, l.deviceError(opAttribute, rc, step)
	}
	ctx, _, rc, step := l.do(0, opPrimaryRetain, dev, 0, 0)
	if rc != 0 {
		return nil, l.deviceError(opPrimaryRetain, rc, step)
	}
	g.ctx = uintptr(ctx)
	if vmm != 0 {
		gran, _, rc, step := l.do(g.ctx, opGranularity, uint64(ordinal), 0, 0)
		if rc != 0 {
			err := l.deviceError(opGranularity, rc, step)
			l.do(0, opPrimaryRelease, dev, 0, 0)
			return nil, err
		}
		g.gran = gran
	}
	return g, nil
}

// vmmAttribute is CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.
const vmmAttribute = 102

// Ordinal returns the device's number.
func (g *Device) Ordinal() int { return g.ordinal }

// Name returns the device's name (cuDeviceGetName).
func (g *Device) Name() string { return g.name }

// TotalMem returns the device memory in bytes (cuDeviceTotalMem_v2).
func (g *Device) TotalMem() uint64 { return g.total }

// SupportsVMM reports whether the device has the virtual memory management
// calls expandable segments need. Without them Granularity is 0, which the
// allocator refuses for expandable_segments:True.
func (g *Device) SupportsVMM() bool { return g.gran != 0 }

// call runs a context operation, failing with ErrClosed after Close.
func (g *Device) call(op int, x, y, z uint64) (a, b uint64, err error) {
	g.life.RLock()
	defer g.life.RUnlock()
	if g.closed {
		return 0, 0, fmt.Errorf("%s on device %d: %w", opCalls[op], g.ordinal, ErrClosed)
	}
	a, b, rc, step := g.lib.do(g.ctx, op, x, y, z)
	if rc != 0 {
		return a, b, g.lib.deviceError(op, rc, step)
	}
	return a, b, nil
}

// Malloc is cuMemAlloc_v2.
func (g *Device) Malloc(size uint64) (uint64, error) {
	p, _, err := g.call(opMalloc, size, 0, 0)
	return p, err
}

// Free is cuMemFree_v2. Like cudaFree it waits for the device.
func (g *Device) Free(addr uint64) error {
	_, _, err := g.call(opFree, addr, 0, 0)
	return err
}

// MemGetInfo is cuMemGetInfo_v2: the device's free and total bytes.
func (g *Device) MemGetInfo() (free, total uint64, err error) {
	return g.call(opMemInfo, 0, 0, 0)
}

// Synchronize waits for all work of the context (cuCtxSynchronize).
func (g *Device) Synchronize() error {
	_, _, err := g.call(opCtxSync, 0, 0, 0)
	return err
}

// Close destroys the pooled events and releases the primary context; when
// it held the last reference the driver frees everything the context
// allocated. Close after a sticky error still releases the context (its
// own errors are then ignored: the process is expected to exit). A second
// Close returns ErrClosed.
func (g *Device) Close() error {
	g.life.Lock()
	defer g.life.Unlock()
	if g.closed {
		return fmt.Errorf("Close of device %d: %w", g.ordinal, ErrClosed)
	}
	g.closed = true
	var first error
	g.mu.Lock()
	pool := g.pool
	g.pool = nil
	g.mu.Unlock()
	for _, e := range pool {
		if _, _, rc, step := g.lib.do(g.ctx, opEventDestroy, uint64(e), 0, 0); rc != 0 && first == nil && !stickyCodes[rc] {
			first = g.lib.deviceError(opEventDestroy, rc, step)
		}
	}
	if _, _, rc, step := g.lib.do(0, opPrimaryRelease, uint64(g.dev), 0, 0); rc != 0 && first == nil && !stickyCodes[rc] {
		first = g.lib.deviceError(opPrimaryRelease, rc, step)
	}
	return first
}

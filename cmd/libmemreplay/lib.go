package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/allocator/cuda"
)

// Environment variables the library reads (once, at its first call).
const (
	envAllocConf  = "MEMREPLAY_ALLOC_CONF"  // allocator settings, PYTORCH_CUDA_ALLOC_CONF syntax
	envTrace      = "MEMREPLAY_TRACE"       // record, and write_trace(NULL) writes here
	envSnapshot   = "MEMREPLAY_SNAPSHOT"    // write_snapshot(NULL) writes here
	envRecord     = "MEMREPLAY_RECORD"      // "1": record without a default path
	envMaxEntries = "MEMREPLAY_MAX_ENTRIES" // recording ring size per device; 0: unbounded
	envOOM        = "MEMREPLAY_OOM"         // "throw" (default) or "null"
	envQuiet      = "MEMREPLAY_QUIET"       // "1": nothing on stderr
	envPolicy     = "MEMREPLAY_POLICY"      // allocator policy: pytorch (default), stitch, lifetime, plan
)

// defaultMaxEntries is the recording ring's size per device: the last
// million events, about 48 MB.
const defaultMaxEntries = 1_000_000

// maxDevices bounds the device ordinals served.
const maxDevices = 256

// options configure a library; the exported functions use one built from
// the environment (optionsFromEnv), the tests build their own.
type options struct {
	cfg          config.Config
	cfgErr       error
	policy       allocator.Policy // nil: PyTorch's
	record       bool
	maxEntries   int
	tracePath    string
	snapshotPath string
	oomThrow     bool
	quiet        bool
	stderr       io.Writer
	// open loads the driver; nil: cuda.Open() ($MEMREPLAY_LIBCUDA or
	// libcuda.so.1).
	open func() (*cuda.Driver, error)
	// deferFrees queues frees in C memory for the next call into Go
	// (freequeue.go) instead of applying each at its call; off while
	// recording.
	deferFrees bool
}

// optionsFromEnv reads the environment: MEMREPLAY_ALLOC_CONF, else the
// PyTorch variables as PyTorch 2.9 reads them (config.FromEnv).
func optionsFromEnv(lookup func(string) (string, bool)) options {
	o := options{maxEntries: defaultMaxEntries, oomThrow: true, stderr: os.Stderr, deferFrees: true}
	get := func(k string) string { v, _ := lookup(k); return v }
	if v, ok := lookup(envAllocConf); ok {
		c, err := config.Parse(v)
		o.cfg = c
		if err != nil {
			o.cfg = config.Default()
			o.cfgErr = fmt.Errorf("%s: %v", envAllocConf, err)
		}
	} else {
		c, err := config.FromEnv(lookup)
		o.cfg = c
		if err != nil {
			o.cfg = config.Default()
			o.cfgErr = fmt.Errorf("%s: %v", c.EnvVar, err)
		}
	}
	o.tracePath = get(envTrace)
	o.snapshotPath = get(envSnapshot)
	o.record = o.tracePath != "" || get(envRecord) == "1"
	if v := get(envMaxEntries); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			o.cfgErr = errors.Join(o.cfgErr, fmt.Errorf("%s=%q: want a count of events (0: unbounded)", envMaxEntries, v))
		} else {
			o.maxEntries = n
		}
	}
	switch v := get(envOOM); v {
	case "", "throw":
	case "null":
		o.oomThrow = false
	default:
		o.cfgErr = errors.Join(o.cfgErr, fmt.Errorf("%s=%q: want throw or null", envOOM, v))
	}
	if v := get(envPolicy); v != "" {
		p, err := allocator.NewPolicy(v)
		if err != nil {
			o.cfgErr = errors.Join(o.cfgErr, fmt.Errorf("%s: %v", envPolicy, err))
		} else {
			o.policy = p
		}
	}
	o.quiet = get(envQuiet) == "1"
	return o
}

// library is the whole state behind the exported functions: one allocator
// per device ordinal, opened at its first use, each with the table from
// the pointers it handed out to their blocks.
type library struct {
	opt options

	mu     sync.Mutex // opening the driver and devices
	drv    *cuda.Driver
	drvErr error
	devs   [maxDevices]atomic.Pointer[device]
	top    atomic.Int32 // 1 + the highest ordinal opened: the devices to search

	seq atomic.Uint64 // orders recorded events across devices

	q   *freeQueue // deferred frees (freequeue.go); nil: each free applied at its call
	qmu sync.Mutex // the queue's one consumer
	// applyHook, when set (by tests), is called with each queued free
	// just before it is applied, under qmu.
	applyHook func(p uintptr)

	lastErr atomic.Pointer[string]
}

func newLibrary(o options) *library {
	if o.stderr == nil {
		o.stderr = os.Stderr
	}
	if o.open == nil {
		o.open = func() (*cuda.Driver, error) { return cuda.Open() }
	}
	l := &library{opt: o}
	if o.deferFrees && !o.record {
		l.q = newFreeQueue()
	}
	if o.cfgErr != nil {
		l.fail(o.cfgErr) // once: every malloc then fails with it quietly
	}
	return l
}

// device is one ordinal's allocator. A device that could not be opened
// keeps its error, and every call on it fails with that error.
//
// mu is the device's lock, like PyTorch's per-device lock: the allocator
// takes none of its own (allocator.WithoutLocking), and the table of its
// pointers is guarded by the same lock, so a malloc or a free takes one
// lock for both, and a malloc that applies queued frees of its device
// takes one for all (freequeue.go). While recording, rec.op is taken
// before mu.
type device struct {
	mu      sync.Mutex
	ptrs    ptrTable // the live pointers of a, under mu
	a       *allocator.Allocator
	rec     *recorder // nil when not recording
	ordinal int
	err     error
	gpu     *cuda.Device
	rdev    *recDevice // the device under the allocator when recording
}

// ready returns ordinal's device if it is open and usable, else nil
// (device then opens it, or says why not).
func (l *library) ready(ordinal int) *device {
	if uint(ordinal) < maxDevices {
		if d := l.devs[ordinal].Load(); d != nil && d.err == nil {
			return d
		}
	}
	return nil
}

// device returns ordinal's allocator, opening it at its first use.
func (l *library) device(ordinal int) (*device, error) {
	if ordinal < 0 || ordinal >= maxDevices {
		return nil, fmt.Errorf("device %d out of range (0 to %d)", ordinal, maxDevices-1)
	}
	if d := l.devs[ordinal].Load(); d != nil {
		return d, d.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.devs[ordinal].Load(); d != nil {
		return d, d.err
	}
	d := l.open(ordinal)
	if d.err != nil && d.err != l.opt.cfgErr {
		d.err = fmt.Errorf("device %d: %w", ordinal, d.err)
	}
	l.devs[ordinal].Store(d)
	if int32(ordinal) >= l.top.Load() {
		l.top.Store(int32(ordinal) + 1)
	}
	return d, d.err
}

// open opens a device (under l.mu).
func (l *library) open(ordinal int) *device {
	d := &device{ordinal: ordinal}
	if l.opt.cfgErr != nil {
		d.err = l.opt.cfgErr
		return d
	}
	if l.drv == nil && l.drvErr == nil {
		l.drv, l.drvErr = l.opt.open()
	}
	if l.drvErr != nil {
		d.err = l.drvErr
		return d
	}
	gpu, err := l.drv.Device(ordinal)
	if err != nil {
		d.err = err
		return d
	}
	var dev allocator.Device = gpu
	if l.opt.record {
		d.rdev = newRecDevice(gpu)
		dev = d.rdev
	}
	// The device's lock (d.mu) serialises every call.
	aopts := []allocator.Option{allocator.WithDeviceIndex(ordinal), allocator.WithoutLocking()}
	if l.opt.policy != nil {
		aopts = append(aopts, allocator.WithPolicy(l.opt.policy))
	}
	a, err := allocator.New(dev, l.opt.cfg, aopts...)
	if err != nil {
		gpu.Close()
		d.err = err
		return d
	}
	d.gpu, d.a = gpu, a
	d.ptrs.init()
	if l.opt.record {
		d.rec = newRecorder(l, d)
		d.rdev.rc = d.rec
	}
	return d
}

// opened returns the devices opened without error, by ordinal.
func (l *library) opened() []*device {
	var out []*device
	for i := range l.devs {
		if d := l.devs[i].Load(); d != nil && d.err == nil {
			out = append(out, d)
		}
	}
	return out
}

// errQuiet marks an error already reported, so fail does not print it
// again.
type errQuiet struct{ error }

func (e errQuiet) Unwrap() error { return e.error }

// fail records err as the last error and prints it on stderr (unless
// MEMREPLAY_QUIET=1). It returns err.
func (l *library) fail(err error) error {
	msg := err.Error()
	l.lastErr.Store(&msg)
	var q errQuiet
	if !l.opt.quiet && !errors.As(err, &q) {
		fmt.Fprintf(l.opt.stderr, "memreplay: %s\n", msg)
	}
	return err
}

// lastError is the most recent failure's message, "" if none, after the
// queued frees are applied (a double free queued by memreplay_free is
// reported by then).
func (l *library) lastError() string {
	l.drain()
	if p := l.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// malloc serves memreplay_malloc. A size of 0 returns 0 and no error, as
// PyTorch's own allocator returns a null pointer for it.
func (l *library) malloc(size uint64, ordinal int, stream uintptr) (uintptr, error) {
	d := l.ready(ordinal)
	if d == nil || size == 0 {
		l.drain()
		if size == 0 {
			return 0, nil
		}
		var err error
		if d, err = l.device(ordinal); err != nil {
			return 0, l.failDevice(err)
		}
	}
	if d.rec != nil {
		return l.mallocRecording(d, size, stream)
	}
	l.lockDrained(d)
	defer d.mu.Unlock()
	return l.mallocLocked(d, size, stream)
}

// mallocLocked is malloc's own work, under d.mu.
func (l *library) mallocLocked(d *device, size uint64, stream uintptr) (uintptr, error) {
	b, err := d.a.Malloc(size, allocator.Stream(stream))
	if err != nil {
		return 0, l.fail(err)
	}
	p := uintptr(b.Addr())
	if !d.ptrs.put(p, ptrEntry{b: b}) {
		l.fail(fmt.Errorf("internal error: %#x handed out while still live", p))
	}
	return p, nil
}

// mallocRecording is malloc while recording (there is no queue).
func (l *library) mallocRecording(d *device, size uint64, stream uintptr) (p uintptr, err error) {
	err = d.serial(func() error {
		p, err = l.mallocLocked(d, size, stream)
		return err
	})
	if d.rec.want.Load() {
		d.rec.checkpoint()
	}
	return p, err
}

// locked runs fn holding the device's locks for a call that must see no
// other call of the device around it: the recording's op lock
// exclusively (when recording), then d.mu.
func (d *device) locked(fn func() error) error { return d.hold(true, fn) }

// serial runs fn holding the device's locks for a call whose entries the
// allocator writes itself, in their place (malloc, free, and record_stream
// and empty_cache: allocator.Requests): the recording's op lock shared
// (when recording), then d.mu.
func (d *device) serial(fn func() error) error { return d.hold(false, fn) }

// hold is locked and serial: the recording's op lock in the mode asked
// for, when recording, then d.mu, around fn.
func (d *device) hold(exclusive bool, fn func() error) error {
	if r := d.rec; r != nil {
		op := r.op.RLocker()
		if exclusive {
			op = &r.op
		}
		op.Lock()
		defer op.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return fn()
}

// stats is the allocator's statistics, under d.mu.
func (d *device) stats() allocator.Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.a.Stats()
}

// snapshot is the allocator's layout, under d.mu.
func (d *device) snapshot() allocator.Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.a.Snapshot()
}

// failDevice reports a device that cannot be opened once, then keeps the
// message in last_error without printing it at every call.
func (l *library) failDevice(err error) error {
	msg := err.Error()
	if p := l.lastErr.Load(); p != nil && *p == msg {
		return err
	}
	return l.fail(err)
}

// free applies a free of p after the queued ones, with no device to look
// in first (the in-process tests).
func (l *library) free(p uintptr) error { return l.freeOn(p, -1) }

// freeOn serves memreplay_free when it enters Go (a full queue, or none):
// the queued frees first, then p's. dev is free's device argument.
func (l *library) freeOn(p uintptr, dev int) error {
	l.drain()
	return l.release(p, dev, nil)
}

// release applies one free. The pointer names the block; PyTorch's device
// argument (dev) says which device's table to look in first, and the
// others are searched when it is wrong (a wrong device still frees the
// right block). held is a device whose lock the caller holds, or nil.
// PyTorch's size and stream are not needed.
func (l *library) release(p uintptr, dev int, held *device) error {
	if p == 0 {
		return nil
	}
	// The usual free: a block of the device named, often the one whose
	// lock the caller holds (a malloc applying its device's queued
	// frees), which needs no lookup.
	d := held
	if d == nil || d.ordinal != dev {
		d = l.ready(dev)
	}
	if d != nil {
		if found, err := l.releaseOn(d, p, held); found {
			return err
		}
	}
	for i := range int(l.top.Load()) {
		if d := l.ready(i); d != nil && i != dev {
			if found, err := l.releaseOn(d, p, held); found {
				return err
			}
		}
	}
	return l.fail(fmt.Errorf("free of %#x: not a pointer memreplay_malloc returned, or already freed", p))
}

// releaseOn frees p if it is one of d's pointers (found), taking d's
// locks unless d is held.
func (l *library) releaseOn(d *device, p uintptr, held *device) (found bool, err error) {
	switch {
	case d == held:
		return l.releaseLocked(d, p)
	case d.rec != nil:
		d.serial(func() error {
			found, err = l.releaseLocked(d, p)
			return err
		})
		if d.rec.want.Load() {
			d.rec.checkpoint()
		}
		return found, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return l.releaseLocked(d, p)
}

// releaseLocked is releaseOn under d.mu.
func (l *library) releaseLocked(d *device, p uintptr) (found bool, err error) {
	e, ok := d.ptrs.take(p)
	if !ok {
		return false, nil
	}
	err = d.a.Free(e.b)
	if e.streamed {
		l.noteStreamed(-1)
	}
	if err != nil {
		return true, l.fail(fmt.Errorf("free of %#x on device %d: %w", p, d.ordinal, err))
	}
	return true, nil
}

// recordStream serves memreplay_record_stream (Tensor.record_stream): the
// block's free will wait for the work queued on stream so far. The
// pointer's device is the one whose table has it.
func (l *library) recordStream(p, stream uintptr) error {
	l.drain()
	for i := range int(l.top.Load()) {
		d := l.ready(i)
		if d == nil {
			continue
		}
		found := false
		err := d.serial(func() error {
			e := d.ptrs.get(p)
			if found = e != nil; !found {
				return nil
			}
			return l.recordStreamLocked(d, e, allocator.Stream(stream))
		})
		if found {
			if err != nil {
				return l.fail(fmt.Errorf("record_stream of %#x: %w", p, err))
			}
			return nil
		}
	}
	return l.fail(fmt.Errorf("record_stream of %#x: not a live pointer of memreplay_malloc", p))
}

// recordStreamLocked is recordStream on p's entry, under d.serial.
func (l *library) recordStreamLocked(d *device, e *ptrEntry, stream allocator.Stream) error {
	if d.rec != nil {
		// The allocator is given a stream of its own for this use
		// (recDevice). The allocator writes the record_stream entry
		// itself, under the device's lock, so no other thread's malloc
		// can write its segment frees between the call and its entry
		// (TestRecordStreamDuringAReleaseRecordsInOrder).
		if stream == e.b.Stream() {
			return nil // the block's own stream: nothing to wait for
		}
		s := d.rdev.synth(stream)
		err := d.rec.r.RecordStream(e.b, s)
		if err != nil {
			d.rdev.drop(s)
		}
		return err
	}
	if err := d.a.RecordStream(e.b, stream); err != nil {
		return err
	}
	if stream != e.b.Stream() && !e.streamed {
		e.streamed = true
		l.noteStreamed(1)
	}
	return nil
}

// emptyCache serves memreplay_empty_cache (torch.cuda.empty_cache): every
// opened device returns its fully free segments to the driver.
func (l *library) emptyCache() error {
	l.drain()
	var errs []error
	for _, d := range l.opened() {
		err := d.serial(func() error {
			if d.rec != nil {
				return d.rec.r.EmptyCache()
			}
			return d.a.EmptyCache()
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("empty_cache on device %d: %w", d.ordinal, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return l.fail(err)
	}
	return nil
}

// setMemoryFraction serves memreplay_set_memory_fraction
// (torch.cuda.set_per_process_memory_fraction).
func (l *library) setMemoryFraction(fraction float64, ordinal int) error {
	l.drain()
	d, err := l.device(ordinal)
	if err != nil {
		return l.failDevice(err)
	}
	err = d.locked(func() error {
		err := d.a.SetMemoryFraction(fraction)
		if err == nil && d.rec != nil {
			d.rec.fraction(fraction)
		}
		return err
	})
	if err != nil {
		return l.fail(fmt.Errorf("set_memory_fraction on device %d: %w", ordinal, err))
	}
	return nil
}

// init serves memreplay_init (PyTorch's init_fn, called at CUDA
// initialisation with the number of devices). Devices still open lazily,
// each at its first use, so the count is not needed; building the library
// (lib) has reported a bad setting by now, before the first malloc.
func (l *library) init(deviceCount int) error {
	_ = deviceCount
	l.drain()
	if l.opt.cfgErr != nil {
		return errQuiet{l.opt.cfgErr}
	}
	return nil
}

// statsJSON serves memreplay_stats_json: torch.cuda.memory_stats(device)'s
// flattened keys and values.
func (l *library) statsJSON(ordinal int) ([]byte, error) {
	l.drain()
	d, err := l.device(ordinal)
	if err != nil {
		return nil, l.failDevice(err)
	}
	st := d.stats()
	return json.Marshal(st.Map())
}

// resolvePath picks the path argument or, when empty, the environment's.
func (l *library) resolvePath(path, def, env string) (string, error) {
	if path != "" {
		return path, nil
	}
	if def != "" {
		return def, nil
	}
	return "", l.fail(fmt.Errorf("no path given and %s is not set", env))
}

// throwMessage is the what() of the exception a failed malloc throws:
// PyTorch's own text for an out-of-memory error (callers match on "CUDA out
// of memory."), the library's name in front of anything else.
func throwMessage(err error) string {
	if errors.Is(err, allocator.ErrOutOfMemory) {
		return err.Error()
	}
	return "memreplay: " + err.Error()
}

// close releases every opened device and the queue's ring (the tests; a
// process that loaded the library keeps its devices until it exits).
func (l *library) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.q != nil {
		l.drain()
		l.q.release()
		l.q = nil
	}
	for i := range l.devs {
		if d := l.devs[i].Load(); d != nil && d.gpu != nil {
			d.gpu.Close()
		}
		l.devs[i].Store(nil)
	}
}

// livePointers counts the pointers handed out and not yet freed, on every
// device (the tests).
func (l *library) livePointers() int {
	n := 0
	for _, d := range l.opened() {
		d.mu.Lock()
		n += d.ptrs.len()
		d.mu.Unlock()
	}
	return n
}

package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memreplay/memreplay/internal/outfile"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// abiVersion is the Tools["libmemreplay"] value of written traces: the
// version of the exported C ABI and of what the recording holds.
const abiVersion = "1"

// traceSource is the Header.Source of traces the library writes.
const traceSource = "libmemreplay"

// recorder keeps one device's recent allocator events, the way PyTorch's
// _record_memory_history(max_entries=N) keeps a ring of trace entries:
// every decision and input as the allocator makes it (replay.Record),
// the most recent ones only.
//
// The ring holds the events since a checkpoint: the exact layout of the
// device (allocator.Snapshot) at a point of the event stream. While it
// fills, a second checkpoint is taken once it holds maxEntries/2 events;
// when it reaches maxEntries, the events before that second checkpoint are
// dropped and the checkpoint becomes the start. So a written trace holds
// between maxEntries/2 and maxEntries events (a little more while a due
// checkpoint waits for the device's operations to pause) and starts from
// the recorded layout, not a reconstructed one: PyTorch's ring would leave
// the start to be inferred, and inference cannot always be exact. Each
// checkpoint costs one snapshot of the layout per maxEntries/2 events.
//
// Events are stored compactly (48 bytes; a marker's label in a side map)
// and numbered from one counter shared by all devices, so that a trace of
// several devices interleaves them in the order they happened.
//
// op orders the device's operations for the recording: malloc, free,
// record_stream and empty_cache hold it shared, which costs an atomic add
// (their entries are written by the allocator, under the device's lock,
// taken after op, in their place:
// TestRecordStreamDuringAReleaseRecordsInOrder); set_memory_fraction,
// checkpoints and taking a trace hold it exclusively, so that no other
// thread's events fall between the allocator's work and the entry written
// after it that explains it, and so that a layout and the events around it
// describe the same moment.
type recorder struct {
	op   sync.RWMutex
	r    *replay.Recording
	l    *library
	d    *device
	want atomic.Bool // a checkpoint is due

	mu        sync.Mutex // the fields below
	buf       []recEvent // the events since base
	max       int        // 0: unbounded
	base      []trace.Segment
	hasBase   bool // base is the layout before buf[0]; false: the empty allocator
	next      []trace.Segment
	nextAt    int // next is the layout before buf[nextAt]
	hasNext   bool
	dropped   uint64
	labels    map[uint64]string // marker labels by seq
	fractions []string          // set_memory_fraction calls, for notes
}

type recEvent struct {
	seq    uint64
	addr   uint64 // the device's free bytes for an oom
	size   uint64
	stream uint64
	time   int64
	action trace.Action
}

func newRecorder(l *library, d *device) *recorder {
	rc := &recorder{l: l, d: d, max: l.opt.maxEntries, labels: map[uint64]string{}}
	if rc.max == 1 {
		rc.max = 2
	}
	rc.r = replay.Record(d.a, int32(d.ordinal), rc.push)
	rc.r.SetClock(func() int64 { return time.Now().UnixMicro() })
	return rc
}

// push stores one event. It runs under the device's lock for the
// allocator's own entries, so it must not call the allocator.
func (rc *recorder) push(e *trace.Event) {
	re := recEvent{seq: rc.l.seq.Add(1), addr: e.Addr, size: e.Size, stream: e.Stream, time: e.TimeUS, action: e.Action}
	if e.Action == trace.ActionOOM {
		re.addr = e.DeviceFree
	}
	rc.mu.Lock()
	if e.Label != "" {
		rc.labels[re.seq] = e.Label
	}
	rc.buf = append(rc.buf, re)
	if rc.max > 0 {
		if len(rc.buf) >= rc.max && rc.hasNext {
			rc.shift()
		}
		if !rc.hasNext && len(rc.buf) >= rc.max/2 {
			rc.want.Store(true)
		}
	}
	rc.mu.Unlock()
}

// shift drops the events before the second checkpoint, which becomes the
// start (under mu).
func (rc *recorder) shift() {
	n := rc.nextAt
	for _, e := range rc.buf[:n] {
		if e.action == trace.ActionMarker {
			delete(rc.labels, e.seq)
		}
	}
	rc.buf = rc.buf[:copy(rc.buf, rc.buf[n:])]
	rc.dropped += uint64(n)
	rc.base, rc.hasBase = rc.next, true
	rc.next, rc.nextAt, rc.hasNext = nil, 0, false
}

// checkpoint records the layout now, if one is due. The callers check
// want first (an atomic load) after each operation, holding no lock.
func (rc *recorder) checkpoint() {
	rc.op.Lock()
	defer rc.op.Unlock()
	if !rc.want.Load() {
		return // another thread took it
	}
	segs := replay.SnapshotSegments(rc.d.snapshot())
	rc.mu.Lock()
	rc.next, rc.nextAt, rc.hasNext = segs, len(rc.buf), true
	rc.want.Store(false)
	rc.mu.Unlock()
}

// fraction records a set_memory_fraction call (under op, exclusively):
// a marker in the trace and a note, since traces carry no event that
// changes the limit and a replay must be told.
func (rc *recorder) fraction(f float64) {
	label := fmt.Sprintf("set_memory_fraction %g", f)
	rc.r.Marker(label)
	rc.mu.Lock()
	rc.fractions = append(rc.fractions, label)
	rc.mu.Unlock()
}

// taken is a copy of a recorder's state.
type taken struct {
	evs       []recEvent
	labels    map[uint64]string
	base      []trace.Segment // the layout before evs[0], when hasBase
	hasBase   bool
	dropped   uint64
	fractions []string
}

// take copies the events, oldest first, and what goes with them. The
// caller holds op exclusively.
func (rc *recorder) take() taken {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tk := taken{evs: slices.Clone(rc.buf), labels: make(map[uint64]string, len(rc.labels)),
		base: rc.base, hasBase: rc.hasBase, dropped: rc.dropped, fractions: slices.Clone(rc.fractions)}
	for k, v := range rc.labels {
		tk.labels[k] = v
	}
	return tk
}

// deviceEvents is one device's recorded events, as taken.
type deviceEvents struct {
	dev    int32
	evs    []recEvent
	labels map[uint64]string
}

// event is the trace event of e.
func (d *deviceEvents) event(e recEvent) trace.Event {
	ev := trace.Event{Action: e.action, Device: d.dev, Addr: e.addr, Size: e.size, Stream: e.stream, TimeUS: e.time, Label: d.labels[e.seq]}
	if e.action == trace.ActionOOM {
		ev.Addr, ev.DeviceFree = 0, e.addr
	}
	return ev
}

// takeTrace takes a trace of every opened device, less its events: the
// header, the layout now as the final state and, after the ring dropped
// events, the layout recorded at its first event (Initial); and each
// device's recorded events (when withEvents; an error if the library is
// not recording).
func (l *library) takeTrace(withEvents bool) (*trace.Trace, []deviceEvents, error) {
	if withEvents && !l.opt.record {
		return nil, nil, fmt.Errorf("not recording: set %s=PATH or %s=1 before the first allocation", envTrace, envRecord)
	}
	cfg := l.opt.cfg
	t := &trace.Trace{
		Header: trace.Header{
			Version:           trace.FormatVersion,
			Source:            traceSource,
			AllocatorSettings: cfg.AllocatorSettings(),
			Tools:             map[string]string{"libmemreplay": abiVersion},
		},
		Stacks:   trace.NewStacks(),
		HasFinal: true,
	}
	var devs []deviceEvents
	for _, d := range l.opened() {
		t.Header.Devices = append(t.Header.Devices, trace.Device{Index: int32(d.ordinal), Name: d.gpu.Name(), Capacity: d.gpu.TotalMem()})
		if d.rec == nil || !withEvents {
			t.Final = append(t.Final, replay.SnapshotSegments(d.snapshot())...)
			continue
		}
		d.rec.op.Lock()
		tk := d.rec.take()
		t.Final = append(t.Final, replay.SnapshotSegments(d.snapshot())...)
		d.rec.op.Unlock()
		devs = append(devs, deviceEvents{dev: int32(d.ordinal), evs: tk.evs, labels: tk.labels})
		if tk.hasBase {
			if t.Initial == nil {
				t.Initial = []trace.Segment{}
			}
			t.Initial = append(t.Initial, tk.base...)
			t.Header.Notes = append(t.Header.Notes, fmt.Sprintf("device %d: the recording ring (%s=%d) dropped the %d oldest events; the trace starts from the layout recorded at that point",
				d.ordinal, envMaxEntries, l.opt.maxEntries, tk.dropped))
		}
		for _, f := range tk.fractions {
			t.Header.Notes = append(t.Header.Notes, fmt.Sprintf("device %d: %s was called; a replay does not apply it: pass --alloc-conf with per_process_memory_fraction", d.ordinal, f))
		}
	}
	if cfg.PerProcessMemoryFraction < 1 {
		t.Header.Notes = append(t.Header.Notes, fmt.Sprintf("per_process_memory_fraction:%g was in force; allocator_settings do not carry it: replay with --alloc-conf %q", cfg.PerProcessMemoryFraction, cfg.Source))
	}
	return t, devs, nil
}

// buildTrace takes a trace of every opened device (takeTrace) with its
// events, the devices' interleaved in the order they happened.
func (l *library) buildTrace(withEvents bool) (*trace.Trace, error) {
	t, devs, err := l.takeTrace(withEvents)
	if err != nil {
		return nil, err
	}
	type tagged struct {
		recEvent
		d *deviceEvents
	}
	var all []tagged
	for i := range devs {
		for _, e := range devs[i].evs {
			all = append(all, tagged{recEvent: e, d: &devs[i]})
		}
	}
	slices.SortFunc(all, func(a, b tagged) int { return cmp.Compare(a.seq, b.seq) })
	t.Events = make([]trace.Event, len(all))
	for i, e := range all {
		t.Events[i] = e.d.event(e.recEvent)
	}
	return t, nil
}

// writeTrace serves memreplay_write_trace: the native memreplay trace
// (docs/trace-format.md), written through a temporary file and a rename.
func (l *library) writeTrace(path string) error {
	l.drain()
	path, err := l.resolvePath(path, l.opt.tracePath, envTrace)
	if err != nil {
		return err
	}
	t, err := l.buildTrace(true)
	if err == nil {
		err = trace.WriteFile(path, t)
	}
	if err != nil {
		return l.fail(fmt.Errorf("write_trace %s: %w", path, err))
	}
	return nil
}

// writeSnapshot serves memreplay_write_snapshot: a PyTorch memory snapshot
// pickle (what torch.cuda.memory._dump_snapshot writes), which
// pytorch.org/memory_viz opens. Without a recording it holds the segments
// only, like a snapshot taken with history recording off. The events go
// from the ring's copy into a spool on disk beside path
// (trace.PyTorchSpool), device by device (a snapshot lists each device's
// entries apart), rather than into a whole trace in memory.
func (l *library) writeSnapshot(path string) error {
	l.drain()
	path, err := l.resolvePath(path, l.opt.snapshotPath, envSnapshot)
	if err != nil {
		return err
	}
	err = l.spoolSnapshot(path)
	if err != nil {
		return l.fail(fmt.Errorf("write_snapshot %s: %w", path, err))
	}
	return nil
}

func (l *library) spoolSnapshot(path string) error {
	// A path that cannot be written fails before the events are spooled.
	if err := outfile.Check(path); err != nil {
		return err
	}
	t, devs, err := l.takeTrace(l.opt.record)
	if err != nil {
		return err
	}
	sp, err := trace.NewPyTorchSpool(spoolDir(path), t.Stacks)
	if err != nil {
		return err
	}
	defer sp.Close()
	for i := range devs {
		d := &devs[i]
		for _, e := range d.evs {
			ev := d.event(e)
			if err := sp.Add(&ev); err != nil {
				return err
			}
		}
		d.evs = nil // the copy goes as it is spooled
	}
	return sp.WriteSnapshotFile(path, t)
}

// spoolDir is where a snapshot's entries are spooled while path is
// written: beside path, on its file system, unless path is a device or a
// FIFO (then the system's temporary directory).
func spoolDir(path string) string {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return ""
	}
	return filepath.Dir(path)
}

package replay

// Recording a replay.
//
// A ReplayRecorder is a Recorder that writes down what the replaying
// allocator did, as a trace of its own: `memreplay replay --record OUT`.
// The recording is to the replay what PyTorch's _record_memory_history is
// to a training run, so it can be opened in pytorch.org/memory_viz (the
// allocator state history of another setting), gives a trace without an
// end state one (generated trial traces, RMM logs), and replays, with the
// same settings, decision for decision (its tests check that).
//
// The mechanism:
//
//   - Decisions, allocs and frees come from Record (record.go): an
//     allocator observer started in Restored, once the device's initial
//     state is in place (the restore's own calls belong to Initial, not to
//     the events). Their addresses are the replaying allocator's, so the
//     events, Initial and Final describe one consistent allocator.
//   - Initial is the device's snapshot at Restored (SnapshotSegments),
//     flagged reconstructed when the replayed trace's was; Final is the
//     snapshot when Finish is called, after Run returned. Their active
//     blocks carry the stacks the replay gave them (Alloc), looked up by
//     address in a per-device map that loses a block when its
//     free_completed is recorded.
//   - An alloc event is emitted inside Malloc, before the replay reports
//     the block's stack through Alloc. Events are therefore held in a small
//     buffer until the next Step: Alloc patches the stack onto the held
//     alloc event of that device and address, and Step stamps the held
//     events with the time of the input that caused them (decisions precede
//     their input, so the buffer holds exactly one input's worth) and
//     passes them on.
//   - The input's annotations (trace.Annotation, beside its events) are
//     carried over, each placed before the recording's events for the
//     input event it came before (Step keeps the shift between the two
//     indices where it changes); a pickle recording writes them as
//     external_annotations.
//   - Inputs that are not allocator calls Record can see (empty_cache,
//     stream_sync, record_stream, trial boundaries, markers) come from the
//     replay itself, through the unexported inputRecorder interface, after
//     the decisions they caused, and only when the replay applied them (not
//     for events an OOM policy skipped). So do the inputs the replay makes
//     up for a PyTorch trace: an inferred empty_cache becomes an explicit
//     one; a free the replay made wait on a private stream becomes a
//     record_stream of that stream before the free_requested, and the
//     completion of the stream's events a stream_sync; a replay of the
//     recording then returns such blocks exactly when this one did, where
//     it would otherwise have to guess.
//
// Memory: NewReplayRecorderTo streams the native format to a writer as the
// replay goes (a buffer of one input's events, plus the live blocks'
// stacks); NewReplayRecorderPyTorch spools the events to disk as the
// replay goes (trace.PyTorchSpool, about 10 bytes an event) and writes the
// PyTorch snapshot at Finish, since a pickle puts the end state before the
// entries; NewReplayRecorder keeps the whole recording in memory (about 72
// bytes per event). The native header is written at the first event: a device
// the replay creates only after it (one the trace's header and initial
// state do not name) is missing from the header's device list, and a
// replay of the recording gives it the default capacity.
//
// A replay beside the import (sim/replay/speculate): the reader's stack
// table and annotations are the import's only once it is over
// (trace.StacksComplete, trace.AnnotationsComplete are false). A PyTorch
// recording reads neither before Finish: its spool checks the stacks
// there (CheckStacksLater), and recAnnAt places the annotations from its
// per-input counts. A native one writes each stack's frames before its
// first event, and fails on such a reader.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/trace"
)

// SourceReplay is the header Source of a recording of a replay.
const SourceReplay = "memreplay-replay"

// ReplayRecorderVersion is the Tools[SourceReplay] value of such
// recordings.
const ReplayRecorderVersion = "1"

// ReplayRecordOptions describe a recording of a replay.
type ReplayRecordOptions struct {
	// Name is the replayed trace's file: the header's SourceFile.
	Name string
	// Notes are added to the header's notes, after the recorder's own
	// (what was replayed under which settings).
	Notes []string
}

// ReplayRecorder records a replay as a trace; see the comment at the top of
// rerecord.go. Pass it as Options.Recorder (with Recorders to keep the
// profiler) and call Finish once Run has returned.
type ReplayRecorder struct {
	src    trace.Reader
	stacks *trace.Stacks
	opts   ReplayRecordOptions

	devs  map[int32]*recDev
	order []int32
	cfg   *config.Config // the replayed configuration, from the first device

	buf      []trace.Event // events since the last Step
	lastTime int64

	// In memory: t. Streaming: w, and nw once the first event came. A
	// PyTorch snapshot: w and spool.
	t       *trace.Trace
	w       io.Writer
	nw      *trace.Writer
	spool   *trace.PyTorchSpool // nil once closed
	pytorch bool
	initial []trace.Segment // streaming: Initial until the writer starts
	started bool
	events  int64
	final   []trace.Segment
	done    bool
	err     error

	// at places the input's annotations (trace.Annotation) among the
	// recording's events, at Finish (a streamed native input has them
	// only at its end); nil when the input has none.
	at      *recAnnAt
	stepped int64 // one past the last input index stepped
}

// recAnnAt keeps what places an input's annotations in the recording:
// an annotation before input event u comes before the recording's events
// for u, at f(u), the number of events the inputs before u recorded. f
// is kept as each input's count, f(u+1)-f(u), two bits an input (3: the
// count is in over), from the first input stepped on (f of it and of
// every input before: base), in chunks of countChunk bytes (grown by
// append, one slice would be copied, and its old copies left to the
// collector, at each doubling). A quarter of a byte an input, for inputs
// whose annotations are not known before the replay (a native file's);
// an input known to have none keeps nothing. Inputs that recorded
// nothing (a free_completed its free_requested consumed, a marker, an
// input the replay skipped) count 0, so an annotation before one of them
// comes after the events before it.
type recAnnAt struct {
	counts  [][]byte
	over    map[int64]int64
	started bool
	base    int64 // f(first), f of every input up to the first stepped
	first   int64 // the first input stepped
	last    int64 // the last input stepped
	lastF   int64 // f(last)
}

// step notes that input index begins at recording index f (the events
// recorded so far): the inputs from the last one stepped up to index
// recorded f-lastF events, all counted to the last one.
func (a *recAnnAt) step(index, f int64) {
	if !a.started {
		a.started, a.base, a.first, a.last, a.lastF = true, f, index, index, f
		return
	}
	if index <= a.last {
		return // stepped again: its events still count to the last input
	}
	a.count(a.last-a.first, f-a.lastF)
	a.last, a.lastF = index, f
}

// countChunk is the size of recAnnAt's chunks of counts (4 inputs a byte).
const countChunk = 64 << 10

func (a *recAnnAt) count(u, n int64) {
	for int64(len(a.counts)) <= u>>2/countChunk {
		a.counts = append(a.counts, make([]byte, countChunk))
	}
	if n >= 3 {
		if a.over == nil {
			a.over = map[int64]int64{}
		}
		a.over[u] = n
		n = 3
	}
	a.counts[u>>2/countChunk][u>>2%countChunk] |= byte(n) << (2 * (u & 3))
}

// place sets each annotation's Event to f of it; one at or past stepped
// (the input's end, or past where the replay stopped) comes after the
// recording's last event (events).
func (a *recAnnAt) place(ann []trace.Annotation, stepped, events int64) {
	order := make([]int, len(ann))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return ann[order[i]].Event < ann[order[j]].Event })
	u, f := a.first, a.base
	for _, i := range order {
		e := ann[i].Event
		switch {
		case !a.started || e >= stepped:
			ann[i].Event = events
			continue
		case e <= a.first:
			ann[i].Event = a.base
			continue
		}
		for u < e {
			k := u - a.first
			n := int64(a.counts[k>>2/countChunk][k>>2%countChunk]>>(2*(k&3))) & 3
			if n == 3 {
				n = a.over[k]
			}
			f += n
			u++
		}
		ann[i].Event = f
	}
}

type recDev struct {
	a        *allocator.Allocator
	capacity uint64
	rec      *Recording
	// stacks holds the stack of every active block (allocated or pending
	// free) by address, for Initial and Final.
	stacks map[uint64]trace.StackID
	// private holds the private streams announced by a record_stream and
	// not yet synchronised.
	private map[uint64]struct{}
}

// NewReplayRecorder returns a recorder of a replay of src that keeps the
// recording in memory: Trace returns it after Finish.
func NewReplayRecorder(src trace.Reader, o ReplayRecordOptions) *ReplayRecorder {
	r := newReplayRecorder(src, o)
	r.t = &trace.Trace{Stacks: r.stacks}
	return r
}

// NewReplayRecorderTo returns a recorder of a replay of src that writes the
// recording to w in the native format as the replay goes; Finish writes the
// end state and finishes the stream (it does not close w).
func NewReplayRecorderTo(w io.Writer, src trace.Reader, o ReplayRecordOptions) *ReplayRecorder {
	r := newReplayRecorder(src, o)
	r.w = w
	return r
}

// NewReplayRecorderPyTorch returns a recorder of a replay of src that
// spools the events in a file in dir (os.TempDir() when empty; unlinked at
// once) as the replay goes; Finish writes the recording to w as a PyTorch
// snapshot pickle, the bytes trace.WritePyTorch writes for the recording
// NewReplayRecorder keeps. Finish or Close releases the spool.
func NewReplayRecorderPyTorch(w io.Writer, dir string, src trace.Reader, o ReplayRecordOptions) (*ReplayRecorder, error) {
	r := newReplayRecorder(src, o)
	sp, err := trace.NewPyTorchSpool(dir, r.stacks)
	if err != nil {
		return nil, err
	}
	if !trace.StacksComplete(src) {
		// A speculative replay's table is the trace's only once the
		// import is over; the pickle reads it at Finish.
		sp.CheckStacksLater()
	}
	r.w, r.spool, r.pytorch = w, sp, true
	return r, nil
}

func newReplayRecorder(src trace.Reader, o ReplayRecordOptions) *ReplayRecorder {
	r := &ReplayRecorder{src: src, stacks: src.Stacks(), opts: o, devs: map[int32]*recDev{}}
	if !trace.AnnotationsComplete(src) || len(trace.AnnotationsOf(src)) > 0 {
		r.at = &recAnnAt{}
	}
	return r
}

// Attach implements Recorder.
func (r *ReplayRecorder) Attach(device int32, a *allocator.Allocator, p Process) {
	d := &recDev{a: a, stacks: map[uint64]trace.StackID{}, private: map[uint64]struct{}{}}
	if _, total, err := p.MemGetInfo(); err == nil && total != UnknownCapacity {
		d.capacity = total
	}
	r.devs[device] = d
	r.order = append(r.order, device)
}

// Restored implements Recorder: the initial state is in place, the
// recording of events starts.
func (r *ReplayRecorder) Restored(device int32) {
	d := r.devs[device]
	if d == nil {
		return
	}
	if r.cfg == nil {
		c := d.a.Config()
		r.cfg = &c
	}
	segs := r.segments(d)
	if len(segs) > 0 {
		if r.started {
			r.fail(fmt.Errorf("replay recording: device %d has an initial state but appeared after the first event", device))
		} else {
			r.initial = append(r.initial, segs...)
		}
	}
	d.rec = Record(d.a, device, func(e *trace.Event) {
		if e.Action == trace.ActionFreeCompleted {
			delete(d.stacks, e.Addr)
		}
		r.buf = append(r.buf, *e)
	})
}

// Alloc implements Recorder: it puts the stack on the alloc event just
// recorded for b.
func (r *ReplayRecorder) Alloc(device int32, index int64, b *allocator.Block, stack trace.StackID) {
	d := r.devs[device]
	if d == nil {
		return
	}
	addr := b.Addr()
	if stack != 0 {
		d.stacks[addr] = stack
	} else {
		delete(d.stacks, addr)
	}
	if index < 0 || stack == 0 {
		return // restored (in Initial), or nothing to patch
	}
	for i := len(r.buf) - 1; i >= 0; i-- {
		if e := &r.buf[i]; e.Action == trace.ActionAlloc && e.Device == device && e.Addr == addr {
			e.Stack = stack
			return
		}
	}
}

// Free implements Recorder (the observer records the free).
func (r *ReplayRecorder) Free(int32, int64, *allocator.Block, trace.StackID) {}

// OOM implements Recorder (the observer records the oom).
func (r *ReplayRecorder) OOM(int32, int64, *allocator.OutOfMemoryError) {}

// Step implements Recorder: the events held since the last step get the
// input's time and go out.
func (r *ReplayRecorder) Step(index int64, e *trace.Event) {
	if e != nil && e.TimeUS != 0 {
		r.lastTime = e.TimeUS
	}
	// What input index begins here is recorded from r.events: the
	// events of this input (its decisions first) are still held.
	if r.at != nil {
		r.at.step(index, r.events)
	}
	r.stepped = index + 1
	r.flush()
}

// annotations returns the input's annotations with their Event moved to
// the recording's (recAnnAt).
func (r *ReplayRecorder) annotations() []trace.Annotation {
	src := trace.AnnotationsOf(r.src)
	if len(src) == 0 || r.at == nil {
		return nil
	}
	out := slices.Clone(src)
	r.at.place(out, r.stepped, r.events)
	return out
}

// input implements inputRecorder.
// The allocator's calls among the inputs (record_stream, empty_cache) are
// not written here: the device's Recording has them from the allocator,
// in their place among its entries.
func (r *ReplayRecorder) input(device int32, e *trace.Event) {
	if r.devs[device] == nil || e.Action == trace.ActionRecordStream || e.Action == trace.ActionEmptyCache {
		return
	}
	ev := *e
	ev.Device = device
	r.buf = append(r.buf, ev)
}

// privateStream implements inputRecorder.
func (r *ReplayRecorder) privateStream(device int32, b *allocator.Block, s allocator.Stream) {
	d := r.devs[device]
	if d == nil {
		return
	}
	if b != nil {
		// The Recording wrote its record_stream.
		d.private[uint64(s)] = struct{}{}
		return
	}
	// Only streams announced in the recording: the private streams of
	// restored blocks are the restoring replay's own, numbered afresh by
	// a replay of the recording.
	if _, ok := d.private[uint64(s)]; ok {
		delete(d.private, uint64(s))
		r.buf = append(r.buf, trace.Event{Action: trace.ActionStreamSync, Device: device, Stream: uint64(s)})
	}
}

// flush passes the held events on, stamped with the current input's time.
func (r *ReplayRecorder) flush() {
	if len(r.buf) == 0 {
		return
	}
	if r.t == nil && !r.pytorch && !r.started {
		r.start()
	}
	for i := range r.buf {
		e := &r.buf[i]
		if e.TimeUS == 0 {
			e.TimeUS = r.lastTime
		}
		if r.t != nil {
			r.t.Events = append(r.t.Events, *e)
		} else if r.pytorch {
			if r.err == nil && r.spool != nil {
				if err := r.spool.Add(e); err != nil {
					r.fail(err)
				}
			}
		} else if r.err == nil {
			if err := r.nw.WriteEvent(e, r.stacks); err != nil {
				r.fail(err)
			}
		}
	}
	r.events += int64(len(r.buf))
	r.buf = r.buf[:0]
}

// start writes the native header and initial state.
func (r *ReplayRecorder) start() {
	r.started = true
	if r.err != nil {
		return
	}
	if !trace.StacksComplete(r.src) {
		// The writer puts each stack's frames before its first event.
		r.fail(errors.New("replay recording: the replayed trace's stacks come later, a native recording needs them as it goes"))
		return
	}
	nw, err := trace.NewWriter(r.w, r.header())
	if err != nil {
		r.fail(err)
		return
	}
	r.nw = nw
	nw.SetStacks(r.stacks)
	if r.initial != nil {
		_, rec := r.src.Initial()
		if err := nw.SetInitial(r.initial, rec); err != nil {
			r.fail(err)
		}
	}
}

func (r *ReplayRecorder) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Finish ends the recording once Run has returned: the events still held,
// and the end state of every device. It returns the first error of writing
// the recording.
func (r *ReplayRecorder) Finish() error {
	if r.done {
		return r.err
	}
	r.done = true
	r.flush()
	sort.Slice(r.order, func(i, j int) bool { return r.order[i] < r.order[j] })
	r.final = []trace.Segment{}
	for _, i := range r.order {
		d := r.devs[i]
		if d.rec != nil {
			d.rec.Stop()
		}
		r.final = append(r.final, r.segments(d)...)
	}
	ann := r.annotations()
	if r.t != nil {
		r.fillTrace(r.t)
		r.t.Annotations = ann
		return r.err
	}
	if r.pytorch {
		if r.spool == nil {
			r.fail(errors.New("replay recording: Finish after Close"))
		}
		if r.err == nil {
			t := &trace.Trace{Stacks: r.stacks, Annotations: ann}
			r.fillTrace(t)
			if err := r.spool.WriteSnapshot(r.w, t); err != nil {
				r.fail(err)
			}
		}
		if err := r.Close(); err != nil {
			r.fail(err)
		}
		return r.err
	}
	if !r.started {
		r.start()
	}
	if r.nw == nil {
		return r.err
	}
	if r.err == nil {
		if err := r.nw.WriteAnnotations(ann); err != nil {
			r.fail(err)
		}
	}
	if r.err == nil {
		if err := r.nw.SetFinal(r.final); err != nil {
			r.fail(err)
		}
	}
	if err := r.nw.Close(); err != nil {
		r.fail(err)
	}
	return r.err
}

// fillTrace gives t the recording's header, initial and end state.
func (r *ReplayRecorder) fillTrace(t *trace.Trace) {
	t.Header = r.header()
	if len(r.initial) > 0 {
		t.Initial = r.initial
		_, t.InitialReconstructed = r.src.Initial()
	}
	t.Final, t.HasFinal = r.final, true
}

// Close releases what a recording holds besides its output (the spool of
// NewReplayRecorderPyTorch): for a replay that ends without Finish. It does
// not close the writer.
func (r *ReplayRecorder) Close() error {
	if r.spool == nil {
		return nil
	}
	err := r.spool.Close()
	r.spool = nil
	return err
}

// segments is device d's state now, with the stacks of its active blocks.
func (r *ReplayRecorder) segments(d *recDev) []trace.Segment {
	segs := SnapshotSegments(d.a.Snapshot())
	for i := range segs {
		for j := range segs[i].Blocks {
			if b := &segs[i].Blocks[j]; b.State != trace.BlockInactive {
				b.Stack = d.stacks[b.Address]
			}
		}
	}
	return segs
}

// Trace returns the recording kept in memory, complete after Finish (nil
// for a streamed recording).
func (r *ReplayRecorder) Trace() *trace.Trace { return r.t }

// Events returns the number of events recorded so far.
func (r *ReplayRecorder) Events() int64 { return r.events }

// Final returns the end state recorded by Finish.
func (r *ReplayRecorder) Final() []trace.Segment { return r.final }

// header describes the recording: the replayed file, the devices as
// simulated, the settings replayed.
func (r *ReplayRecorder) header() trace.Header {
	src := r.src.Header()
	h := trace.Header{
		Version:    trace.FormatVersion,
		Source:     SourceReplay,
		SourceFile: r.opts.Name,
		Tools:      map[string]string{SourceReplay: ReplayRecorderVersion},
	}
	ids := append([]int32(nil), r.order...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, i := range ids {
		dev := trace.Device{Index: i, Capacity: r.devs[i].capacity}
		for _, s := range src.Devices {
			if s.Index == i {
				dev.Name = s.Name
			}
		}
		h.Devices = append(h.Devices, dev)
	}
	name := r.opts.Name
	if name == "" {
		name = src.SourceFile
	}
	what := "a trace"
	if src.Source != "" {
		what = "a " + src.Source + " trace"
	}
	if name != "" {
		what += " (" + name + ")"
	}
	if r.cfg == nil {
		h.Notes = append(h.Notes, "replay of "+what+" by memreplay's allocator")
	} else {
		h.AllocatorSettings = r.cfg.AllocatorSettings()
		settings := "the default settings"
		if s := r.cfg.String(); s != "" {
			settings = fmt.Sprintf("PYTORCH_CUDA_ALLOC_CONF=%q", s)
		}
		h.Notes = append(h.Notes, fmt.Sprintf("replay of %s by memreplay's allocator under %s: the addresses, segments and end state are the replay's", what, settings))
		if back, err := config.FromAllocatorSettings(h.AllocatorSettings); err != nil || back.String() != r.cfg.String() {
			h.Notes = append(h.Notes, fmt.Sprintf("allocator_settings cannot hold all of these settings: replay this recording with --alloc-conf %q", r.cfg.String()))
		}
	}
	if init, rec := r.src.Initial(); rec && len(init) > 0 {
		h.Notes = append(h.Notes, "initial state: as the replay restored it from the reconstruction of the replayed trace's")
	}
	h.Notes = append(h.Notes, r.opts.Notes...)
	return h
}

// inputRecorder is implemented by Recorders that record the replay as a
// trace (ReplayRecorder): the replay reports to it what it gives its
// allocators besides mallocs and frees. Both methods run after the
// allocator calls they describe, and only when those succeeded.
type inputRecorder interface {
	// input reports an input the replay applied: one of the trace's
	// empty_cache, stream_sync, record_stream, trial_start, trial_end and
	// marker events, or an empty_cache it inferred.
	input(device int32, e *trace.Event)
	// privateStream reports, with b, that the replay marked b as used on
	// the private stream s before freeing it, so that its free waits (see
	// "Frees" in replay.go); with b nil, that s's events were completed.
	privateStream(device int32, b *allocator.Block, s allocator.Stream)
}

// Recorders returns a Recorder passing every call to each of rs in turn
// (nil ones left out): the CLI's profiler and a ReplayRecorder side by
// side. It returns nil for none and the recorder itself for one.
func Recorders(rs ...Recorder) Recorder {
	var m multiRecorder
	var ins []inputRecorder
	for _, r := range rs {
		if r == nil {
			continue
		}
		m = append(m, r)
		if in, ok := r.(inputRecorder); ok {
			ins = append(ins, in)
		}
	}
	switch {
	case len(m) == 0:
		return nil
	case len(m) == 1:
		return m[0]
	case len(ins) == 0:
		return m
	}
	return &multiInputRecorder{m, ins}
}

type multiRecorder []Recorder

func (m multiRecorder) Attach(device int32, a *allocator.Allocator, p Process) {
	for _, r := range m {
		r.Attach(device, a, p)
	}
}
func (m multiRecorder) Restored(device int32) {
	for _, r := range m {
		r.Restored(device)
	}
}
func (m multiRecorder) Alloc(device int32, index int64, b *allocator.Block, stack trace.StackID) {
	for _, r := range m {
		r.Alloc(device, index, b, stack)
	}
}
func (m multiRecorder) Free(device int32, index int64, b *allocator.Block, stack trace.StackID) {
	for _, r := range m {
		r.Free(device, index, b, stack)
	}
}
func (m multiRecorder) OOM(device int32, index int64, err *allocator.OutOfMemoryError) {
	for _, r := range m {
		r.OOM(device, index, err)
	}
}
func (m multiRecorder) Step(index int64, e *trace.Event) {
	for _, r := range m {
		r.Step(index, e)
	}
}

// Marker passes the marker to the recorders that want it.
func (m multiRecorder) Marker(device int32, index int64, e *trace.Event) {
	for _, r := range m {
		if mr, ok := r.(MarkerRecorder); ok {
			mr.Marker(device, index, e)
		}
	}
}

// Annotations passes the annotations to the recorders that want them.
func (m multiRecorder) Annotations(ann []trace.Annotation) {
	for _, r := range m {
		if ar, ok := r.(AnnotationRecorder); ok {
			ar.Annotations(ann)
		}
	}
}

type multiInputRecorder struct {
	multiRecorder
	ins []inputRecorder
}

func (m *multiInputRecorder) input(device int32, e *trace.Event) {
	for _, in := range m.ins {
		in.input(device, e)
	}
}
func (m *multiInputRecorder) privateStream(device int32, b *allocator.Block, s allocator.Stream) {
	for _, in := range m.ins {
		in.privateStream(device, b, s)
	}
}

var (
	_ Recorder      = (*ReplayRecorder)(nil)
	_ inputRecorder = (*ReplayRecorder)(nil)
)

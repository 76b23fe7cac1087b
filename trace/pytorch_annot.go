package trace

// PyTorch ≥ 2.6's external_annotations: record_function ranges, imported
// as marker events among the device's trace entries.
//
// What PyTorch writes. With _record_memory_history on, a RecordFunction
// callback (torch/csrc/cuda/memory_snapshot.cpp, _initRecordAnnotations,
// scopes USER_SCOPE, thread-local or global as the call asked) calls
// CUDACachingAllocator::recordAnnotation({{"name", fn.name()},
// {"stage", "START"}}) when a record_function range is entered and the same
// with "END" when it is left. The allocator keeps these in a ring buffer of
// its own, apart from the device traces (pytorch/pytorch#130964 moved them
// out of device_traces, where ≈2.4 kept them as "user_defined" entries,
// because threads without the right device set put them in the wrong
// device's list), and the snapshot writes them as the top-level list
// external_annotations of dicts {stage, name, device, time_us} (the
// metadata's keys, then device: the thread's current device, and time_us:
// the same clock as the trace entries' time_us). memory_viz, at the two
// MemoryViz.js commits pytorch_write.go names, does not read them.
//
// Where they go. Each becomes an ActionMarker event on its device, at its
// time among that device's entries, labelled with the range's name, its
// stack one frame {filename: the name, line: 0, name: "START" or "END"}:
// the shape of the ≈2.4 user_defined markers (memory_snapshot.cpp builds
// unwind::Frame{fn.name(), "START", 0}, and unwind::Frame's fields are
// filename, funcname, lineno), so the two PyTorch forms of the same range
// read as the same events. "In time order" is, precisely:
//
//  1. An annotation belongs before the first entry of its device it does
//     not follow: a START before the first entry at its time or later (the
//     range's own allocations are at its time or later), an END before the
//     first entry later than its time (the range's last ones are at its
//     time or earlier). Annotations of a device are taken in time order
//     (a stable sort: PyTorch's list is in time order already), each no
//     earlier than the one before it.
//  2. It then moves back to the nearest place right after an alloc or oom
//     entry of its device, or to the device's start: it goes before the
//     free, free_completed and segment entries between that alloc and its
//     place, never between two of them. Another thread's annotation can
//     fall inside an allocator call (a free's free_requested and
//     free_completed, a malloc's releases and its new segment), and the
//     replay reads such runs as one call (a free_requested followed by its
//     free_completed is the usual free; releases followed by anything but
//     their malloc's alloc are inferred as empty_cache): a marker there
//     would change a decision. Right after an alloc or oom nothing of the
//     replay looks across, so a marker there changes nothing it decides;
//     the order against every alloc and oom stays the time order.
//     Annotations after the device's last entry stay at its end.
//
// Annotations outside the recorded span are kept, at the start or the end:
// the real snapshots have them (an optimizer's zero_grad before the first
// allocation, a step's END after its last free). A device named only by
// annotations is a device of the trace, as one named only by segments is.
//
// Malformed input follows the importer's rules: a non-list
// external_annotations, an item that is not a dict, device and time_us
// missing or not ints, name or stage not strings are errors naming the
// item (PyTorch always writes all four, with these types). An annotation
// without a name or stage, or with a stage other than START and END (the
// metadata is free-form for C++ callers of recordAnnotation), is skipped
// and counted in a header note. Other keys are ignored.
//
// Streaming. The list comes after device_traces in PyTorch's files, so
// the entries are converted (and, from ReadPyTorchObserved, observed)
// before the annotations are known: the sinks put the markers in at the
// end (sliceSink.flatten, pipeLog.end), in one pass over the events, and
// an observer is told to restart and is given the merged events again.
// Only snapshots with annotations pay that pass.
//
// Writing (pytorch_write.go) is the reverse: a marker of this shape goes
// back to external_annotations when ReadPyTorch would put it back where it
// is (annotWriter checks that with the rules above as the events go by);
// else it stays a user_defined entry, which reads back the same.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// ptAnn is an annotation to merge: its marker event and whether its stage
// is START (rule 1's tie).
type ptAnn struct {
	e     Event
	start bool
}

// annFollows says whether e is an entry the annotation a follows (e is
// before a in time), rule 1.
func annFollows(a *ptAnn, e *Event) bool {
	if a.start {
		return e.TimeUS < a.e.TimeUS
	}
	return e.TimeUS <= a.e.TimeUS
}

// annSafeAfter says whether a marker may go right after e (rule 2).
func annSafeAfter(e *Event) bool { return e.Action == ActionAlloc || e.Action == ActionOOM }

// annotationStack is the one-frame stack of an annotation marker.
func annotationFrame(stage, name string) Frame { return Frame{Filename: name, Name: stage} }

func isStage(s string) bool { return s == "START" || s == "END" }

// UserDefinedLabel is the label a ≈2.4 user_defined entry's first frame
// gives its marker. PyTorch's record_function ranges write the range's
// name as the frame's filename and START or END as its name; memreplay
// before this reading wrote them the other way round ({filename: START,
// name: the range}) and other writers put a plain label in the name.
// So: a frame named START or END is labelled by its filename, any other
// by its name ("" when it says nothing).
func UserDefinedLabel(f Frame) string {
	if isStage(f.Name) && f.Filename != "" {
		return f.Filename
	}
	if isStage(f.Filename) || f.Name != "" {
		return f.Name
	}
	return ""
}

// annotationOf reports whether the marker e, with its stack's frames,
// has an annotation's shape, and if so whether it is a START.
func annotationOf(e *Event, s *Stacks) (isAnn, start bool) {
	switch AnnotationStage(e, s) {
	case "START":
		return true, true
	case "END":
		return true, false
	}
	return false, false
}

// AnnotationStage is "START" or "END" for a marker that is one end of a
// record_function range (a PyTorch annotation: its stack is the one frame
// {filename: its label, line: 0, name: stage}), "" for any other event.
func AnnotationStage(e *Event, s *Stacks) string {
	if e.Action != ActionMarker || e.Label == "" || s == nil || int(e.Stack) >= s.NumStacks() {
		return ""
	}
	idx := s.FrameIndices(e.Stack)
	if len(idx) != 1 || int(idx[0]) >= s.NumFrames() {
		return ""
	}
	f := s.Frame(idx[0])
	if f.Line != 0 || f.Filename != e.Label || !isStage(f.Name) {
		return ""
	}
	return f.Name
}

// annotations converts external_annotations (see the file comment).
func (c *ptConv) annotations(v pv) *convErr {
	l, err := c.wantList("", v)
	if err != nil {
		return err
	}
	if err := c.spend(len(l.items)); err != nil {
		return err
	}
	var skipped [annSkips]int
	n := 0
	for i, it := range l.items {
		a, skip, err := c.annotation(it)
		if err != nil {
			return err.in(fmt.Sprintf("[%d]", i))
		}
		if skip != annKept {
			skipped[skip]++
			n++
			continue
		}
		c.devices[a.e.Device] = true
		c.ann = append(c.ann, a)
	}
	if n > 0 {
		var why []string
		for k := annKept + 1; k < annSkips; k++ {
			if skipped[k] > 0 {
				why = append(why, fmt.Sprintf("%d %s", skipped[k], annSkipWhy[k]))
			}
		}
		c.note("%d of %d external_annotations skipped (%s)", n, len(l.items), strings.Join(why, ", "))
	}
	// Rule 1's order: by device, then time; PyTorch's order among equal
	// times.
	slices.SortStableFunc(c.ann, func(a, b ptAnn) int {
		if a.e.Device != b.e.Device {
			return cmp.Compare(a.e.Device, b.e.Device)
		}
		return cmp.Compare(a.e.TimeUS, b.e.TimeUS)
	})
	return nil
}

// Why an annotation was skipped.
const (
	annKept = iota
	annNoName
	annNoStage
	annOtherStage
	annSkips
)

// annSkipWhy says each reason in the header's note, in this order.
var annSkipWhy = [annSkips]string{
	annNoName:     "without a name",
	annNoStage:    "without a stage",
	annOtherStage: "with a stage other than START and END",
}

func (c *ptConv) annotation(v pv) (ptAnn, int, *convErr) {
	var a ptAnn
	d, err := c.wantDict("", v)
	if err != nil {
		return a, 0, err
	}
	var name, stage string
	var haveName, haveStage, haveDev, haveTime bool
	for _, it := range d.items {
		var err *convErr
		switch c.word(it.key) {
		case wName:
			name, err = c.wantStr(".name", it.val)
			haveName = true
		case wStage:
			stage, err = c.wantStr(".stage", it.val)
			haveStage = true
		case wDevice:
			a.e.Device, err = c.wantDevice(".device", it.val)
			haveDev = true
		case wTimeUS:
			a.e.TimeUS, err = c.wantInt(".time_us", it.val)
			haveTime = true
		}
		if err != nil {
			return a, 0, err
		}
	}
	switch {
	case !haveDev:
		return a, 0, ptErrAt("", "missing key \"device\"")
	case !haveTime:
		return a, 0, ptErrAt("", "missing key \"time_us\"")
	case !haveName || name == "":
		return a, annNoName, nil
	case !haveStage:
		return a, annNoStage, nil
	case !isStage(stage):
		return a, annOtherStage, nil
	}
	a.e.Action, a.e.Label = ActionMarker, name
	a.e.Stack = c.t.Stacks.Intern([]Frame{annotationFrame(stage, name)})
	a.start = stage == "START"
	return a, annKept, nil
}

// annMerger puts annotations among a device-ordered stream of events
// (rules 1 and 2): push each event in order, then end; out receives the
// merged stream.
type annMerger struct {
	ann []ptAnn // still to place, sorted by device and time
	out func(e *Event)
	run []Event // the entries since the last alloc or oom, held back
	dev int32   // the device of run
}

// push takes the next event.
func (m *annMerger) push(e *Event) {
	if len(m.run) > 0 && e.Device != m.dev {
		m.flush()
	}
	// Annotations of earlier devices come after those devices' events.
	for len(m.ann) > 0 && m.ann[0].e.Device < e.Device {
		m.place()
	}
	// Those it does not follow go before the run.
	for len(m.ann) > 0 && m.ann[0].e.Device == e.Device && !annFollows(&m.ann[0], e) {
		m.place()
	}
	if annSafeAfter(e) && len(m.run) == 0 {
		m.out(e)
		return
	}
	m.run = append(m.run, *e)
	m.dev = e.Device
	if annSafeAfter(e) {
		m.flush()
	}
}

func (m *annMerger) place() {
	m.out(&m.ann[0].e)
	m.ann = m.ann[1:]
}

func (m *annMerger) flush() {
	for i := range m.run {
		m.out(&m.run[i])
	}
	m.run = m.run[:0]
}

// end places what is left: the held-back run, then the remaining
// annotations (after their devices' last entries).
func (m *annMerger) end() {
	m.flush()
	for len(m.ann) > 0 {
		m.place()
	}
}

// annWriter decides, as a device's events go by, which annotation-shaped
// markers the writer moves to external_annotations: those ReadPyTorch puts
// back where they are. It follows rules 1 and 2 over the entries that stay
// in device_traces ("kept") and holds back only what it cannot decide yet.
//
// Candidates come in gaps: runs of annotation-shaped markers between two
// kept entries. A gap may move when its place is one rule 2 allows (the
// device's start, right after an alloc or oom, or the device's end), its
// times are in order and no earlier than the last moved annotation's, and
// its first annotation follows every kept entry since the last moved one
// was placed (else rule 1 would place it earlier). It is then queued, and
// the kept entries after it are held back, until rule 1 has placed each of
// its annotations, which must happen before the next alloc or oom (rule 2
// then takes it back to the gap). A gap that fails is written where it is,
// as user_defined entries (kept entries like any other), and what was held
// after it is decided again. While a gap is queued, later candidates are
// kept. Whole gaps move or stay: half a gap moved would read back
// elsewhere.
type annWriter struct {
	p      *ptWriter
	b      *batcher
	active bool // the device has had a candidate

	kept        int   // kept entries of the device so far, held ones included
	lastAllowed int   // rule 2's last place: 0, or one past the last kept alloc or oom
	maxT        int64 // the latest time of the kept entries since the last placement
	haveMaxT    bool
	lastT       int64 // the time of the device's last moved annotation
	haveLastT   bool

	gap    []annHeld // the candidates since the last kept entry
	gapPos int       // their place, in kept entries

	q      []annHeld // the queued gap
	placed int       // how many of q rule 1 has placed
	qPos   int
	saved  annSaved  // the state when q was queued
	held   []annHeld // the kept entries after q, not written yet

	moved []ptAnn // the annotations moved so far, all devices
}

// annHeld is an event held back (start is set for annotations).
type annHeld struct {
	i int // the event's index, for error messages
	ptAnn
}

type annSaved struct {
	kept, lastAllowed int
	maxT              int64
	haveMaxT          bool
}

// startDevice readies w for the next device's list.
func (w *annWriter) startDevice(b *batcher) {
	*w = annWriter{p: w.p, b: b, moved: w.moved}
}

// event takes the device's next event.
func (w *annWriter) event(i int, e *Event) {
	if !w.active && e.Action != ActionMarker {
		// The usual case, without a copy: written at once.
		w.p.entry(i, e, w.b)
		if !ptLeftOut(e.Action) {
			w.count(e)
		}
		return
	}
	w.take(annHeld{i: i, ptAnn: ptAnn{e: *e}})
}

// count moves the state past a kept entry.
func (w *annWriter) count(e *Event) {
	w.kept++
	if annSafeAfter(e) {
		w.lastAllowed = w.kept
	}
	if !w.haveMaxT || e.TimeUS > w.maxT {
		w.maxT, w.haveMaxT = e.TimeUS, true
	}
}

func (w *annWriter) take(h annHeld) {
	if ptLeftOut(h.e.Action) || h.e.Action == ActionInvalid || h.e.Action >= numActions {
		w.p.entry(h.i, &h.e, w.b) // no entry (or an error): nothing to decide
		return
	}
	if len(w.q) == 0 {
		if isAnn, start := annotationOf(&h.e, w.p.stacks); isAnn {
			w.active = true
			h.start = start
			if len(w.gap) == 0 {
				w.gapPos = w.kept
			}
			w.gap = append(w.gap, h)
			return
		}
	}
	if len(w.gap) > 0 {
		w.closeGap(false)
	}
	w.keep(h)
}

// closeGap queues the gap, or moves it at the device's end (atEnd), when
// it may move; else it keeps it.
func (w *annWriter) closeGap(atEnd bool) {
	g := w.gap
	w.gap = nil
	ok := atEnd || w.gapPos == w.lastAllowed
	t, haveT := w.lastT, w.haveLastT
	for k := range g {
		if haveT && g[k].e.TimeUS < t {
			ok = false
		}
		t, haveT = g[k].e.TimeUS, true
	}
	if ok && w.haveMaxT && !annFollows(&g[0].ptAnn, &Event{TimeUS: w.maxT}) {
		ok = false
	}
	switch {
	case !ok:
		for _, h := range g {
			w.keep(h)
		}
	case atEnd:
		w.move(g)
	default:
		w.q, w.placed, w.qPos = g, 0, w.gapPos
		w.saved = annSaved{w.kept, w.lastAllowed, w.maxT, w.haveMaxT}
	}
}

// keep handles an entry that stays in device_traces.
func (w *annWriter) keep(h annHeld) {
	if len(w.q) == 0 {
		w.p.entry(h.i, &h.e, w.b)
		w.count(&h.e)
		return
	}
	// Rule 1 places the queued annotations h does not follow; rule 2 at
	// lastAllowed, which must be their gap.
	for w.placed < len(w.q) && !annFollows(&w.q[w.placed].ptAnn, &h.e) {
		if w.lastAllowed != w.qPos {
			w.fail(&h)
			return
		}
		w.placed++
	}
	if w.placed == len(w.q) {
		w.move(w.q)
		held := w.held
		w.q, w.held = nil, nil
		for _, x := range held {
			w.p.entry(x.i, &x.e, w.b)
		}
		w.p.entry(h.i, &h.e, w.b)
		w.count(&h.e)
		w.maxT = h.e.TimeUS // the last was placed at h: the next is checked from h on
		return
	}
	if annSafeAfter(&h.e) {
		// Past it, what is still queued would read back after it.
		w.fail(&h)
		return
	}
	w.held = append(w.held, h)
	w.count(&h.e)
}

// fail keeps the queued gap where it is and decides again what was held
// after it, then h (when not nil).
func (w *annWriter) fail(h *annHeld) {
	q, held := w.q, w.held
	w.q, w.held = nil, nil
	s := w.saved
	w.kept, w.lastAllowed, w.maxT, w.haveMaxT = s.kept, s.lastAllowed, s.maxT, s.haveMaxT
	for _, x := range q {
		w.keep(x)
	}
	for _, x := range held {
		w.take(x)
	}
	if h != nil {
		w.take(*h)
	}
}

// move records g as moved.
func (w *annWriter) move(g []annHeld) {
	for _, h := range g {
		w.moved = append(w.moved, h.ptAnn)
	}
	w.lastT, w.haveLastT = g[len(g)-1].e.TimeUS, true
}

// endDevice decides what is left at the device's end: a queued gap was
// followed by a kept entry, so rule 1 would place what is left of it at
// the end, not at the gap.
func (w *annWriter) endDevice() {
	for len(w.q) > 0 {
		w.fail(nil)
	}
	if len(w.gap) > 0 {
		w.closeGap(true)
	}
}

package trace

// PyTorch ≥ 2.6's external_annotations: record_function ranges, kept
// beside the events (Trace.Annotations, Packed.Annotations), not among
// them.
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
// Why beside. Nothing of the allocator ever sees an annotation: they are
// not entries of device_traces, and a replay's decisions cannot depend on
// them. Kept as marker events among the entries (as memreplay did before),
// they shifted every later entry's event index (so "peak at event N" no
// longer named memory_viz's entry N), had to be kept out of the allocator
// calls the replay reads as one (a malloc's releases and its segment, a
// free's two entries), and, as the list comes after device_traces in the
// file, made a streamed import re-encode its whole packed log and restart
// the replay that ran beside it. Beside the events they cost a snapshot
// without them nothing, and one with them a pass that only reads the
// entries' devices and times.
//
// An Annotation is {Device, TimeUS, Name, Stage, Event}. Event places it
// among the events: it is the number of the trace's events before it, so
// it comes right before event Event (Event == the number of events: after
// the last). In a snapshot the events are device 0's entries, then device
// 1's, and so on, so Event is also its place among its device's entries.
// ReadPyTorch computes it from the times (PlaceAnnotations), the rule
// memreplay used to put the markers in place:
//
//   - An annotation comes before the first entry of its device it does
//     not follow: a START before the first entry at its time or later (the
//     range's own allocations are at its time or later), an END before the
//     first entry later than its time (the range's last ones are at its
//     time or earlier). The annotations of a device are taken in time
//     order (a stable sort: PyTorch's list is in time order already), each
//     no earlier than the one before it. One after the device's last
//     entry comes after it: before the next device's first event, or at
//     the trace's end.
//
// (The markers in the stream also had to move back to just after an alloc
// or oom, out of the allocator calls the replay reads as one; beside the
// events there is nothing to move out of.) Annotations outside the
// recorded span are kept, at the start or the end: the real snapshots
// have them (an optimizer's zero_grad before the first allocation, a
// step's END after its last free). A device named only by annotations is
// a device of the trace, as one named only by segments is.
//
// Trace.Annotations is in time order: the file's list, sorted stably by
// time_us (PyTorch's order, so a snapshot's list is kept as it is, and
// written back as it was read). Event is not ordered across devices.
//
// Malformed input follows the importer's rules: a non-list
// external_annotations, an item that is not a dict, device and time_us
// missing or not ints, name or stage not strings are errors naming the
// item (PyTorch always writes all four, with these types). An annotation
// without a name or stage, or with a stage other than START and END (the
// metadata is free-form for C++ callers of recordAnnotation), is skipped
// and counted in a header note. Other keys are ignored.
//
// Streaming. The list comes after device_traces, so the entries are
// converted (and, from ReadPyTorchObserved, packed and observed) before
// the annotations are known; the sinks then place them (sliceSink.flatten
// over Trace.Events, pipeLog.end over the packed log: one read of the
// devices and times, no event re-encoded, no observer restarted). Only
// snapshots with annotations pay that pass.
//
// Markers stay markers. ≈2.4's user_defined entries (the same ranges,
// one frame {filename: the name, line: 0, name: "START" or "END"}: the
// shape memory_snapshot.cpp gives unwind::Frame{fn.name(), "START", 0})
// are real entries of device_traces, so they stay marker events at their
// entry index, labelled by UserDefinedLabel; AnnotationStage tells their
// stage, and the profiler lists them with the annotations.
//
// Writing. The pickle writer (pytorch_write.go) writes Trace.Annotations
// back as external_annotations, in list order; marker events, whatever
// their shape, stay user_defined entries. The native format (native.go)
// keeps the list, Event included, in records of their own (tagAnnotations:
// an ancillary tag, which readers older than it skip, losing only the
// annotations), so pickle -> .mrt -> pickle gives the same list back.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Annotation is one end of a record_function range, kept beside the
// events (see the file comment).
type Annotation struct {
	Device int32
	TimeUS int64
	Name   string
	Stage  string // "START" or "END"
	// Event is the number of the trace's events before it: it comes right
	// before event Event, or after the last when Event is the number of
	// events.
	Event int64
}

// annFollows says whether the annotation a follows an entry at time t
// (the entry is before a in time): the rule of the file comment.
func annFollows(a *Annotation, t int64) bool {
	if a.Stage == "START" {
		return t < a.TimeUS
	}
	return t <= a.TimeUS
}

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

// annotations converts external_annotations (see the file comment) into
// c.t.Annotations, in time order; their Event is set once the events are
// all in (PlaceAnnotations, from the sink).
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
	// Sized once: grown by append, a list of millions cost five times
	// its size in allocations (append's 1.25 growth past a few hundred).
	// spend has counted the items against the input.
	ann := make([]Annotation, 0, len(l.items))
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
		c.devices[a.Device] = true
		ann = append(ann, a)
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
	if len(ann) == 0 {
		ann = nil
	}
	slices.SortStableFunc(ann, func(a, b Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) })
	c.t.Annotations = ann
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

func (c *ptConv) annotation(v pv) (Annotation, int, *convErr) {
	var a Annotation
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
			a.Device, err = c.wantDevice(".device", it.val)
			haveDev = true
		case wTimeUS:
			a.TimeUS, err = c.wantInt(".time_us", it.val)
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
	a.Name = name
	a.Stage = "END"
	if stage == "START" {
		a.Stage = "START"
	}
	return a, annKept, nil
}

// annPlacer sets the Event of annotations from the events, given in
// order (push, then end): the rule of the file comment. It reads only
// the events' devices and times.
type annPlacer struct {
	ann []*Annotation // by device, then time (stable), still to place
	i   int64         // the events pushed
}

// newAnnPlacer readies the placing of ann (in time order, as
// Trace.Annotations); nil when there is none.
func newAnnPlacer(ann []Annotation) *annPlacer {
	if len(ann) == 0 {
		return nil
	}
	p := &annPlacer{ann: make([]*Annotation, len(ann))}
	for i := range ann {
		p.ann[i] = &ann[i]
	}
	// Stable: the list's order (time order) among a device's annotations.
	slices.SortStableFunc(p.ann, func(a, b *Annotation) int { return cmp.Compare(a.Device, b.Device) })
	return p
}

// push takes the next event's device and time.
func (p *annPlacer) push(dev int32, t int64) {
	for len(p.ann) > 0 {
		a := p.ann[0]
		if a.Device > dev || (a.Device == dev && annFollows(a, t)) {
			break
		}
		// An earlier device's (after its last event), or one e does not
		// follow: before e.
		a.Event = p.i
		p.ann = p.ann[1:]
	}
	p.i++
}

// end places the rest after the last event.
func (p *annPlacer) end() {
	for _, a := range p.ann {
		a.Event = p.i
	}
	p.ann = nil
}

// PlaceAnnotations sets the Event of each of ann (in time order, as
// Trace.Annotations) from the events: where ReadPyTorch puts an
// annotation of external_annotations among events (the file comment's
// rule). The events must be in a snapshot's order (by device).
func PlaceAnnotations(ann []Annotation, events []Event) {
	p := newAnnPlacer(ann)
	if p == nil {
		return
	}
	for i := range events {
		p.push(events[i].Device, events[i].TimeUS)
	}
	p.end()
}

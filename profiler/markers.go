package profiler

// The record_function annotations of the timeline (Profile.Markers).
//
// They come two ways. PyTorch ≥ 2.6 keeps them beside the trace's events
// (trace.Annotation, from external_annotations): the caller hands them
// over once (Annotations), any time before Finish, since a snapshot's
// list is known only at the end of its import. ≈2.4 wrote them among the
// entries, as user_defined markers whose one frame is {filename: label,
// line: 0, name: START or END} (trace.AnnotationStage): the replay
// reports those through Marker, with the other markers (memreplay's own
// "step N", PyTorch's snapshot entries), and whether a marker has the
// shape is read from its stack.
//
// The cap. At most Options.MaxAnnotations are listed, the earliest by
// event first; MarkersDropped counts the annotations past it and nothing
// else. Before this file, Marker kept the first MaxOOMs markers with a
// stack and sorted them out at Finish: a trial trace's own "step N"
// markers (which have stacks) filled the list, and the annotations after
// them were dropped and counted with the step markers. Now a marker is
// classified when it comes, where the stack table is already readable
// (every replay but the speculative one, whose table is filled only after
// it: sim/replay's OpenReplay), and only annotations are kept. Markers of
// the speculative replay are held unclassified until Finish: the first
// pendingCap of them as they are, the rest as counts by label and stack
// (one entry per distinct pair), so that the counts stay exact whatever
// their number. The trace's Annotations (a big snapshot has millions)
// are cut to the earliest MaxAnnotations as they are read at Finish,
// with a buffer of twice the cap (earliestBeside), never one Marker each.

import (
	"cmp"
	"slices"

	"github.com/memreplay/memreplay/trace"
)

// pendingCap bounds the unclassified markers held one by one.
const pendingCap = 1 << 20

// marks is the profiler's state for the markers.
type marks struct {
	kept    []Marker // annotation markers, at most MaxAnnotations
	dropped int64    // annotation markers past kept
	pending []Marker // markers not classified yet (their stack field set)
	// over counts the unclassified markers past pendingCap.
	over   map[markKey]int64
	beside []trace.Annotation
}

type markKey struct {
	label string
	stack trace.StackID
}

// Marker implements replay.MarkerRecorder: a marker with a stack may be
// a record_function annotation (see markers.go). Markers without a stack
// (PyTorch's snapshot entries) are not annotations.
func (p *Profiler) Marker(device int32, index int64, e *trace.Event) {
	if e.Stack == 0 || e.Label == "" {
		return
	}
	m := &p.marks
	if p.stacks != nil && int(e.Stack) < p.stacks.NumStacks() {
		p.keepMarker(Marker{Event: index, Device: device, TimeUS: e.TimeUS, Label: e.Label,
			Stage: trace.AnnotationStage(e, p.stacks)})
		return
	}
	if len(m.pending) < pendingCap {
		m.pending = append(m.pending, Marker{Event: index, Device: device, TimeUS: e.TimeUS, Label: e.Label, stack: e.Stack})
		return
	}
	if m.over == nil {
		m.over = map[markKey]int64{}
	}
	m.over[markKey{e.Label, e.Stack}]++
}

// keepMarker keeps an annotation marker (Stage set) under the cap.
func (p *Profiler) keepMarker(mk Marker) {
	if mk.Stage == "" {
		return
	}
	m := &p.marks
	if len(m.kept) >= p.opts.MaxAnnotations {
		m.dropped++
		return
	}
	m.kept = append(m.kept, mk)
}

// Annotations implements replay.AnnotationRecorder: the trace's
// annotations (trace.Annotation: PyTorch's external_annotations, beside
// the events), listed with the annotation markers. replay.Run hands them
// over after the last event; a caller whose reader has none (the
// speculative replay's) calls it before Finish. A later call replaces the
// list; the profiler keeps the slice. Those past the events replayed (a
// replay stopped at an OOM) are not listed.
func (p *Profiler) Annotations(ann []trace.Annotation) { p.marks.beside = ann }

// finishMarkers classifies the pending markers and returns the
// annotations, the annotation markers and the trace's Annotations merged
// in event order and cut at MaxAnnotations, and how many were left out.
func (p *Profiler) finishMarkers() ([]Marker, int64) {
	m := &p.marks
	for _, mk := range m.pending {
		mk.Stage = trace.AnnotationStage(&trace.Event{Action: trace.ActionMarker, Label: mk.Label, Stack: mk.stack}, p.stacks)
		mk.stack = 0
		p.keepMarker(mk)
	}
	m.pending = nil
	for k, n := range m.over {
		if trace.AnnotationStage(&trace.Event{Action: trace.ActionMarker, Label: k.label, Stack: k.stack}, p.stacks) != "" {
			m.dropped += n // after pendingCap markers: past any cap
		}
	}
	m.over = nil
	dropped := m.dropped
	// Markers arrive in event order; the pending ones were kept after
	// those classified at once, which a replay never mixes.
	slices.SortStableFunc(m.kept, func(a, b Marker) int { return cmp.Compare(a.Event, b.Event) })
	if len(m.beside) == 0 {
		return slices.Clone(m.kept), dropped
	}
	out, n := p.earliestBeside()
	out = mergeMarkers(out, m.kept)
	// n annotations beside, of which len(out)-len(m.kept) are in out.
	dropped += n - int64(len(out)-len(m.kept))
	if len(out) > p.opts.MaxAnnotations {
		dropped += int64(len(out) - p.opts.MaxAnnotations)
		out = out[:p.opts.MaxAnnotations:p.opts.MaxAnnotations]
	}
	return out, dropped
}

// earliestBeside returns the MaxAnnotations earliest of the trace's
// Annotations within the events replayed, in event order (then device,
// then the list's order: an annotation that comes before event N sorts
// before the marker that is event N), and how many are within the events
// replayed. No more than the cap can be listed, so no more than twice it
// are held at a time (sorted and cut whenever the buffer fills): a
// snapshot's millions of annotations cost no Marker each.
func (p *Profiler) earliestBeside() ([]Marker, int64) {
	limit := p.opts.MaxAnnotations
	byEvent := func(a, b Marker) int {
		if c := cmp.Compare(a.Event, b.Event); c != 0 {
			return c
		}
		return cmp.Compare(a.Device, b.Device)
	}
	out := make([]Marker, 0, min(len(p.marks.beside), 2*limit))
	var n int64
	for _, a := range p.marks.beside {
		if a.Event > p.events {
			continue
		}
		n++
		if len(out) == cap(out) {
			// Stable: those kept precede the new ones in the list's order.
			slices.SortStableFunc(out, byEvent)
			out = out[:limit]
		}
		out = append(out, Marker{Event: a.Event, Device: a.Device, TimeUS: a.TimeUS, Label: a.Name, Stage: a.Stage})
	}
	slices.SortStableFunc(out, byEvent)
	return out[:min(len(out), limit)], n
}

// mergeMarkers merges the annotations (sorted by Event) with the markers
// (sorted by Event; an annotation at N comes before the marker at N).
func mergeMarkers(ann, marks []Marker) []Marker {
	if len(marks) == 0 {
		return ann
	}
	out := make([]Marker, 0, len(ann)+len(marks))
	i := 0
	for _, mk := range marks {
		for i < len(ann) && ann[i].Event <= mk.Event {
			out = append(out, ann[i])
			i++
		}
		out = append(out, mk)
	}
	return append(out, ann[i:]...)
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const inspectHelp = `Usage: memreplay inspect [flags] TRACE

Says what a trace holds without replaying it: its format and source, the
recording allocator's settings, devices, events by kind, markers by label
(PyTorch's external_annotations among them: they are counted apart, not as
events, since PyTorch keeps them beside its trace entries), the time span,
stacks, the state before the first event (recorded, or reconstructed for a
partial trace) and after the last, and whether it carries the recording's
own decisions, which 'memreplay replay --check' compares.

Examples:
  memreplay inspect snapshot.pickle
  memreplay inspect --format json trace.mrt

Flags:
`

// inspection is what inspect reports; its JSON form is stable.
type inspection struct {
	File                 string            `json:"file"`
	Format               string            `json:"format"`
	Source               string            `json:"source"`
	Tools                map[string]string `json:"tools,omitempty"`
	AllocatorSettings    map[string]any    `json:"allocator_settings"`
	Devices              []deviceSummary   `json:"devices"`
	Events               int64             `json:"events"`
	Actions              map[string]int64  `json:"actions"`
	Decisions            int64             `json:"decisions"`
	Checkable            bool              `json:"checkable"`
	FirstTimeUS          int64             `json:"first_time_us,omitempty"`
	LastTimeUS           int64             `json:"last_time_us,omitempty"`
	Stacks               int               `json:"stacks"`
	Frames               int               `json:"frames"`
	Initial              *stateSummary     `json:"initial"`
	InitialReconstructed bool              `json:"initial_reconstructed"`
	Final                *stateSummary     `json:"final"`
	// Markers sums the markers by label (PyTorch's record_function
	// annotations with their START and END counts, those beside the
	// events included, snapshot entries, memreplay's own), in order of
	// first appearance; left out when the trace has none.
	Markers []markerSummary `json:"markers,omitempty"`
	// Annotations counts PyTorch's external_annotations, kept beside
	// the events (trace.Annotation): they are in Markers, not in Events.
	Annotations int64    `json:"annotations,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

type markerSummary struct {
	Label      string `json:"label"`
	Count      int64  `json:"count"`
	Start      int64  `json:"start,omitempty"` // annotations' START markers
	End        int64  `json:"end,omitempty"`
	FirstEvent int64  `json:"first_event"`
	// first is where the label first appears (FirstEvent is its event),
	// for markerSummaries' order.
	first markerFirst
}

// maxMarkerLabels bounds the labels inspect tells apart (a profiler's
// ProfilerStep#N annotations name every step); the rest are summed.
const maxMarkerLabels = 100

type deviceSummary struct {
	Index          int32  `json:"index"`
	Events         int64  `json:"events"`
	Capacity       uint64 `json:"capacity,omitempty"`
	CapacitySource string `json:"capacity_source,omitempty"`
}

type stateSummary struct {
	Segments       int    `json:"segments"`
	ReservedBytes  uint64 `json:"reserved_bytes"`
	Blocks         int    `json:"blocks"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PendingFree    int    `json:"pending_free_blocks"`
	Expandable     int    `json:"expandable_segments"`
	PrivatePools   int    `json:"private_pool_segments"`
}

func summarizeState(segs []trace.Segment) *stateSummary {
	s := &stateSummary{Segments: len(segs)}
	for _, g := range segs {
		s.ReservedBytes += g.TotalSize
		if g.Expandable {
			s.Expandable++
		}
		if g.PoolID != [2]int64{} {
			s.PrivatePools++
		}
		for _, b := range g.Blocks {
			s.Blocks++
			switch b.State {
			case trace.BlockAllocated:
				s.AllocatedBytes += b.Size
			case trace.BlockPendingFree:
				s.PendingFree++
			}
		}
	}
	return s
}

func inspectCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", inspectHelp, stderr)
	format := fs.String("format", "table", "output: table or json")
	fs.Bool("no-color", false, "accepted for scripts (the output has no colour)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Errorf("want one trace file, got %d arguments (see memreplay help inspect)", fs.NArg())}
	}
	if *format != "table" && *format != "json" {
		return usageError{fmt.Errorf("--format %q: want table or json", *format)}
	}
	path := fs.Arg(0)
	// A snapshot's events are counted while it is imported (on the
	// import's second goroutine); a streamed trace's here, as read.
	c := newEventCounts()
	o, err := openTrace(path, c)
	if err != nil {
		return err
	}
	defer o.Close()
	r := o.Reader
	h := r.Header()
	init, rec := r.Initial()
	var final []trace.Segment
	var hasFinal bool
	if o.Packed != nil {
		final, hasFinal = o.Packed.Final, o.Packed.HasFinal
	} else {
		if err := eachEvent(r, func(e *trace.Event) error { c.Event(c.events, e); return nil }); err != nil {
			return err
		}
		final, hasFinal = r.Final()
	}
	in := &inspection{File: path, Format: string(o.Format), Source: h.Source, Tools: h.Tools,
		AllocatorSettings: h.AllocatorSettings, Actions: map[string]int64{}, Notes: h.Notes,
		Events: c.events, Decisions: c.decisions, FirstTimeUS: c.first, LastTimeUS: c.last}
	for a, n := range c.actions {
		if n > 0 {
			in.Actions[trace.Action(a).String()] = n
		}
	}
	if init != nil {
		in.Initial = summarizeState(init)
		in.InitialReconstructed = rec
	}
	perDev := c.perDev
	if hasFinal {
		in.Final = summarizeState(final)
		for _, s := range final {
			if _, ok := perDev[s.Device]; !ok {
				perDev[s.Device] = 0
			}
		}
	}
	// By index, not a scan of the header per device: a snapshot of
	// 60,000 (empty) devices took seconds here.
	header := make(map[int32]trace.Device, len(h.Devices))
	for _, d := range h.Devices {
		header[d.Index] = d
		if _, ok := perDev[d.Index]; !ok {
			perDev[d.Index] = 0
		}
	}
	for d, n := range perDev {
		ds := deviceSummary{Index: d, Events: n}
		if hd, ok := header[d]; ok {
			ds.Capacity, ds.CapacitySource = hd.Capacity, hd.CapacitySource
		}
		in.Devices = append(in.Devices, ds)
	}
	sort.Slice(in.Devices, func(i, j int) bool { return in.Devices[i].Index < in.Devices[j].Index })
	in.Stacks, in.Frames = r.Stacks().NumStacks()-1, r.Stacks().NumFrames()
	ann := o.Annotations()
	in.Annotations = int64(len(ann))
	// The time span is the recording's: annotations included, as when
	// they were events.
	for i := range ann {
		c.time(ann[i].TimeUS)
	}
	in.FirstTimeUS, in.LastTimeUS = c.first, c.last
	in.Markers = c.markerSummaries(r.Stacks(), ann)
	// Decisions to compare: the recorded segment and oom entries, or the
	// alloc addresses of a trace with a final state to check against.
	in.Checkable = replay.Checkable(h.Source, in.Decisions, in.Actions["alloc"], len(final))

	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	return writeInspection(stdout, in)
}

// eventCounts counts what inspect reports of the events; it is a
// trace.EventObserver, so that a snapshot's events are counted while it is
// imported rather than read again after.
type eventCounts struct {
	events, decisions int64
	actions           [256]int64
	perDev            map[int32]int64
	first, last       int64
	// markers: by label (at most maxMarkerLabels, then "" for the rest),
	// the count of each stack, for the annotations' stages.
	markers     map[string]*markerCount
	markerOrder []string
}

type markerCount struct {
	first  int64
	stacks map[trace.StackID]int64
}

func newEventCounts() *eventCounts { return &eventCounts{perDev: map[int32]int64{}} }

func (c *eventCounts) Restart() { *c = *newEventCounts() }

func (c *eventCounts) Event(i int64, e *trace.Event) {
	c.events++
	c.actions[e.Action]++
	c.perDev[e.Device]++
	if e.Action.IsDecision() {
		c.decisions++
	}
	if e.Action == trace.ActionMarker {
		c.marker(i, e)
	}
	c.time(e.TimeUS)
}

// time widens the time span to t (0: not recorded).
func (c *eventCounts) time(t int64) {
	if t != 0 {
		if c.first == 0 || t < c.first {
			c.first = t
		}
		c.last = max(c.last, t)
	}
}

func (c *eventCounts) marker(i int64, e *trace.Event) {
	if c.markers == nil {
		c.markers = map[string]*markerCount{}
	}
	label := e.Label
	m := c.markers[label]
	if m == nil {
		if len(c.markerOrder) >= maxMarkerLabels {
			label = "" // the rest
			m = c.markers[label]
		}
		if m == nil {
			m = &markerCount{first: i, stacks: map[trace.StackID]int64{}}
			c.markers[label] = m
			c.markerOrder = append(c.markerOrder, label)
		}
	}
	m.stacks[e.Stack]++
}

// markerSummaries sums the markers by label, with the annotations'
// stages read from their stacks, and the annotations beside the events
// (ann) with the markers of their label; an annotation's first event is
// the one it comes before. Labels are in order of first appearance, at
// most maxMarkerLabels, the rest summed under "".
func (c *eventCounts) markerSummaries(s *trace.Stacks, ann []trace.Annotation) []markerSummary {
	by := map[string]*markerSummary{}
	var order []*markerSummary
	// A label's first appearance (markerSummary.first): its first
	// event, then an annotation (which comes before the event it names)
	// before a marker, then the annotation's device and place in the
	// list (the profiler's order, without a sorted copy of the list).
	get := func(label string, at markerFirst) *markerSummary {
		m := by[label]
		if m == nil {
			m = &markerSummary{Label: label, FirstEvent: at.event, first: at}
			by[label] = m
			order = append(order, m)
		}
		if at.before(m.first) {
			m.first, m.FirstEvent = at, at.event
		}
		return m
	}
	for _, label := range c.markerOrder {
		mc := c.markers[label]
		ms := get(label, markerFirst{event: mc.first, marker: true})
		for id, n := range mc.stacks {
			ms.Count += n
			switch trace.AnnotationStage(&trace.Event{Action: trace.ActionMarker, Label: label, Stack: id}, s) {
			case "START":
				ms.Start += n
			case "END":
				ms.End += n
			}
		}
	}
	if len(ann) == 0 {
		return derefSummaries(order)
	}
	for i := range ann {
		a := &ann[i]
		ms := get(a.Name, markerFirst{event: a.Event, device: a.Device, index: i})
		ms.Count++
		if a.Stage == "START" {
			ms.Start++
		} else {
			ms.End++
		}
	}
	// First appearance; at the same event, the annotation comes first.
	slices.SortStableFunc(order, func(a, b *markerSummary) int {
		switch fa, fb := a.first, b.first; {
		case fa.before(fb):
			return -1
		case fb.before(fa):
			return 1
		}
		return 0
	})
	if len(order) > maxMarkerLabels {
		kept := order[:maxMarkerLabels:maxMarkerLabels]
		rest := by[""] // "(other labels)"
		if rest == nil || !slices.Contains(kept, rest) {
			rest = &markerSummary{FirstEvent: order[maxMarkerLabels].FirstEvent}
			kept = append(kept, rest)
		}
		for _, m := range order[maxMarkerLabels:] {
			rest.Count += m.Count
			rest.Start += m.Start
			rest.End += m.End
			rest.FirstEvent = min(rest.FirstEvent, m.FirstEvent)
		}
		order = kept
	}
	return derefSummaries(order)
}

// markerFirst is where a marker label appears (markerSummaries).
type markerFirst struct {
	event  int64
	marker bool // a marker event; else an annotation before event
	device int32
	index  int // the annotation's place in Trace.Annotations
}

func (a markerFirst) before(b markerFirst) bool {
	if a.event != b.event {
		return a.event < b.event
	}
	if a.marker != b.marker {
		return !a.marker
	}
	if a.device != b.device {
		return a.device < b.device
	}
	return a.index < b.index
}

func derefSummaries(ms []*markerSummary) []markerSummary {
	var out []markerSummary
	for _, m := range ms {
		out = append(out, *m)
	}
	return out
}

func writeInspection(w io.Writer, in *inspection) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRendition(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)}))
	t.Header("trace", in.File)
	add := func(k, v string) { _ = t.Append(k, v) }
	add("format", in.Format)
	add("source", in.Source)
	if s, ok := in.AllocatorSettings["PYTORCH_CUDA_ALLOC_CONF"].(string); ok {
		if s == "" {
			s = "(defaults)"
		}
		add("recorded settings", s)
	} else if in.AllocatorSettings == nil {
		add("recorded settings", "not recorded (PyTorch defaults assumed)")
	}
	// Devices with no events and nothing known of them are named as
	// ranges in one row, as the replay's reports do: a pickle may list
	// 60,000 empty device traces. The JSON keeps one entry each.
	empty := func(d deviceSummary) bool { return len(in.Devices) > 1 && d.Events == 0 && d.Capacity == 0 }
	var idle []int32
	for _, d := range in.Devices {
		if empty(d) {
			idle = append(idle, d.Index)
		}
	}
	if len(idle) > 0 {
		add("devices, no events", fmt.Sprintf("%d: %s", len(idle), report.DeviceRanges(idle)))
	}
	for _, d := range in.Devices {
		if empty(d) {
			continue
		}
		c := "unknown"
		if d.Capacity > 0 {
			c = allocator.FormatSize(d.Capacity)
			if d.CapacitySource != "" {
				c += " (" + d.CapacitySource + ")"
			}
		}
		add(fmt.Sprintf("device %d", d.Index), fmt.Sprintf("%d events, capacity %s", d.Events, c))
	}
	add("events", fmt.Sprint(in.Events))
	keys := make([]string, 0, len(in.Actions))
	for k := range in.Actions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add("  "+k, fmt.Sprint(in.Actions[k]))
	}
	if in.Annotations > 0 {
		add("  annotations", fmt.Sprintf("%d (external_annotations, beside the events)", in.Annotations))
	}
	for _, m := range in.Markers {
		label := fmt.Sprintf("%q", m.Label)
		if m.Label == "" {
			label = "(other labels)"
		}
		v := fmt.Sprintf("%d, first at event %d", m.Count, m.FirstEvent)
		if m.Start+m.End > 0 {
			v = fmt.Sprintf("%d (record_function: %d START, %d END), first at event %d", m.Count, m.Start, m.End, m.FirstEvent)
		}
		add("    "+label, v)
	}
	if in.FirstTimeUS != 0 {
		span := time.Duration(in.LastTimeUS-in.FirstTimeUS) * time.Microsecond
		add("time span", fmt.Sprintf("%s (from %s)", span, time.UnixMicro(in.FirstTimeUS).UTC().Format(time.RFC3339)))
	}
	add("stacks", fmt.Sprintf("%d distinct, %d frames", in.Stacks, in.Frames))
	state := func(s *stateSummary) string {
		if s == nil {
			return "none"
		}
		out := fmt.Sprintf("%d segments (%s reserved), %d blocks, %s allocated", s.Segments,
			allocator.FormatSize(s.ReservedBytes), s.Blocks, allocator.FormatSize(s.AllocatedBytes))
		if s.PendingFree > 0 {
			out += fmt.Sprintf(", %d pending free", s.PendingFree)
		}
		if s.Expandable > 0 {
			out += fmt.Sprintf(", %d expandable", s.Expandable)
		}
		if s.PrivatePools > 0 {
			out += fmt.Sprintf(", %d in private pools (replayed as default pools)", s.PrivatePools)
		}
		return out
	}
	initial := "empty (recorded from the start)"
	if in.Initial != nil {
		initial = state(in.Initial)
		if in.InitialReconstructed {
			initial = "reconstructed: " + initial
		}
	}
	add("before first event", initial)
	add("after last event", state(in.Final))
	check := "no: nothing to compare"
	if in.Checkable {
		check = fmt.Sprintf("yes: %d recorded decisions, %d alloc addresses", in.Decisions, in.Actions["alloc"])
	}
	add("replay --check", check)
	if err := t.Render(); err != nil {
		return err
	}
	for _, n := range in.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

package report

import (
	"fmt"
	"io"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/trace"
)

// The pprof sample types, in value order. Names follow Go's heap profiles
// where the meaning matches (inuse_space, alloc_space), so that pprof's
// -inuse_space and -alloc_space flags pick them.
var pprofTypes = []*profile.ValueType{
	{Type: "inuse_space", Unit: "bytes"},    // live bytes at the peak
	{Type: "reserved_space", Unit: "bytes"}, // live + stranded share at the peak
	{Type: "waste_space", Unit: "bytes"},    // stranded share at the peak
	{Type: "alloc_count", Unit: "count"},    // allocations over the run
	{Type: "alloc_space", Unit: "bytes"},    // bytes allocated over the run
}

const (
	vInuse = iota
	vReserved
	vWaste
	vAllocCount
	vAllocSpace
)

// pprofBuilder interns functions and locations: one Location per distinct
// frame, one Function per distinct (name, file).
type pprofBuilder struct {
	p       *profile.Profile
	mapping *profile.Mapping
	stacks  *trace.Stacks
	funcs   map[[2]string]*profile.Function
	locs    map[trace.Frame]*profile.Location
	byStack map[trace.StackID][]*profile.Location
}

func (b *pprofBuilder) location(f trace.Frame) *profile.Location {
	if l := b.locs[f]; l != nil {
		return l
	}
	key := [2]string{f.Name, f.Filename}
	fn := b.funcs[key]
	if fn == nil {
		name := f.Name
		if name == "" {
			name = "??" // pprof would show the mapping's name instead
		}
		// No SystemName: pprof "demangles" a function whose Name equals
		// its SystemName, and takes any name with angle brackets for C++,
		// cutting "<module>" and "<listcomp>" down to nothing (shown as
		// the mapping, "[python]"). A Name of its own is shown as
		// written.
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, Filename: f.Filename}
		b.funcs[key] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	id := uint64(len(b.p.Location) + 1)
	// Addresses are synthetic but distinct, inside the one mapping, so
	// that no tool merges two frames by address.
	l := &profile.Location{ID: id, Mapping: b.mapping, Address: b.mapping.Start + id,
		Line: []profile.Line{{Function: fn, Line: f.Line}}}
	b.locs[f] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// stack returns a site's locations, leaf first: PyTorch records the
// innermost frame first, which is the order pprof wants. The leaf is the
// site's own frame (profiler.SiteFrame): the frames inside it are the
// allocator and ATen's allocation plumbing, the same for every site, and
// as leaves they would be all that pprof -top shows.
func (b *pprofBuilder) stack(id trace.StackID) []*profile.Location {
	if ls, ok := b.byStack[id]; ok {
		return ls
	}
	all := b.stacks.Frames(id)
	frames := profiler.TrimFrames(all)
	if f, ok := profiler.SiteFrame(all); ok {
		for i := range frames {
			if frames[i] == f {
				frames = frames[i:]
				break
			}
		}
	}
	if len(frames) == 0 {
		frames = []trace.Frame{{Name: "no stack recorded"}}
	}
	ls := make([]*profile.Location, len(frames))
	for i, f := range frames {
		ls[i] = b.location(f)
	}
	b.byStack[id] = ls
	return ls
}

// WritePprof writes the profile in pprof's format (gzipped protobuf): live,
// reserved and stranded bytes per site at each device's peak, and
// allocations per site over the run (see the package comment). It needs
// in.Profile; in.Stacks gives the frames (without it every site is
// "<no stack>").
func WritePprof(w io.Writer, in *Input) error {
	prof := in.Profile
	if prof == nil {
		return fmt.Errorf("report: pprof output needs the profiler's profile")
	}
	b := &pprofBuilder{
		p: &profile.Profile{SampleType: pprofTypes, DefaultSampleType: "inuse_space"},
		// pprof wants a mapping that says symbols are present, or it
		// tries to symbolize and complains about a missing binary.
		mapping: &profile.Mapping{ID: 1, Start: 0x10000, Limit: 0x10000 + 1<<40, File: "python",
			HasFunctions: true, HasFilenames: true, HasLineNumbers: true},
		stacks: in.Stacks, funcs: map[[2]string]*profile.Function{}, locs: map[trace.Frame]*profile.Location{},
		byStack: map[trace.StackID][]*profile.Location{},
	}
	b.p.Mapping = []*profile.Mapping{b.mapping}
	b.p.Comments = pprofComments(in)

	for _, d := range prof.Devices {
		if d.Peak == nil {
			continue
		}
		for _, s := range d.Peak.Sites {
			v := make([]int64, len(pprofTypes))
			v[vInuse] = int64(s.LiveBytes)
			v[vReserved] = int64(s.LiveBytes + s.StrandedBytes)
			v[vWaste] = int64(s.StrandedBytes)
			b.p.Sample = append(b.p.Sample, &profile.Sample{Location: b.stack(s.Stack), Value: v,
				Label: map[string][]string{
					"device": {strconv.Itoa(int(s.Device))},
					"stream": {strconv.FormatUint(s.Stream, 10)},
				}})
		}
	}
	for _, s := range prof.Sites {
		if s.AllocCount == 0 {
			continue
		}
		v := make([]int64, len(pprofTypes))
		v[vAllocCount] = int64(s.AllocCount)
		v[vAllocSpace] = int64(s.AllocBytes)
		b.p.Sample = append(b.p.Sample, &profile.Sample{Location: b.stack(s.Stack), Value: v})
	}
	if err := b.p.CheckValid(); err != nil {
		return fmt.Errorf("report: pprof profile: %w", err)
	}
	return b.p.Write(w)
}

func pprofComments(in *Input) []string {
	var c []string
	if l := traceLabel(in.Trace); l != "" {
		c = append(c, "trace: "+l)
	}
	if in.Result != nil {
		c = append(c, "config: "+configLabel(in.Result))
	}
	p := in.Profile
	if p == nil {
		return c
	}
	if len(p.Devices) < 2 {
		c = append(c, fmt.Sprintf("peak live %s at %s; peak reserved %s", size(p.Total.PeakLiveBytes),
			event(p.Total.PeakLiveEvent), size(p.Total.PeakReservedBytes)))
		for _, d := range p.Devices {
			if d.Peak != nil {
				c = append(c, fmt.Sprintf("device %d: inuse/reserved/waste_space at its peak, %s", d.Index, event(d.Peak.Event)))
			}
		}
		return c
	}
	// Several devices: each device's samples are at its own peak, so the
	// profile's inuse_space total is the sum of the devices' peaks, which
	// the header says before the peak of their sum at one moment.
	var inuse uint64
	for _, d := range p.Devices {
		if d.Peak == nil {
			c = append(c, fmt.Sprintf("device %d: nothing allocated", d.Index))
			continue
		}
		var live uint64
		for _, s := range d.Peak.Sites {
			live += s.LiveBytes
		}
		inuse += live
		c = append(c, fmt.Sprintf("device %d: peak live %s at %s, peak reserved %s; its inuse/reserved/waste_space samples are at this peak",
			d.Index, size(live), event(d.Peak.Event), size(d.PeakReservedBytes)))
	}
	c = append(c, fmt.Sprintf("inuse_space total %s: the sum of the %d devices' own peaks", size(inuse), len(p.Devices)),
		fmt.Sprintf("the %d devices summed at one moment: peak live %s at %s, peak reserved %s", len(p.Devices),
			size(p.Total.PeakLiveBytes), event(p.Total.PeakLiveEvent), size(p.Total.PeakReservedBytes)))
	return c
}

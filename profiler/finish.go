package profiler

import (
	"slices"
	"sort"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// Finish takes the captures still pending and the final sample, reads the
// allocators' statistics and the processes' counters, and returns the
// profile. Call it after the replay; calling it again returns a fresh
// profile of the same state.
func (p *Profiler) Finish() *Profile {
	p.syncPos()
	if p.bounds != nil {
		// Still not known: the bounds' length if they met since the last
		// sample, else the events replayed (a replay the caller drops).
		n := p.events
		if lo, hi := p.bounds.Bounds(); lo == hi && lo > 0 {
			n = lo
		}
		p.settleLength(n)
	}
	p.cur = p.events
	for _, d := range p.order {
		if d.syncPending {
			p.syncReserved(d)
			d.syncPending = false
		}
	}
	p.anySync = false
	if p.retryCheck {
		// The replay stopped at the event (no Step after it).
		p.readRetries(p.events - 1)
	}
	if p.open != nil {
		p.open.closeFree()
	}
	if p.totalPending {
		p.takeTotal()
	}
	for _, d := range p.order {
		if d.ownMark >= 0 {
			p.takeOwn(d)
		}
	}
	if len(p.order) > 0 && p.events > 0 && (len(p.timeline) == 0 || p.timeline[len(p.timeline)-1].Event < p.events-1) {
		p.sample(p.events - 1)
	}

	// The first profile gets the timeline itself, not a copy (20,000
	// samples for a page); a later sample copies it first (timelineGiven),
	// and a later Finish gets its own copy.
	timeline := p.timeline[:len(p.timeline):len(p.timeline)]
	if p.timelineGiven {
		timeline = slices.Clone(p.timeline)
	}
	p.timelineGiven = p.timeline != nil
	prof := &Profile{
		Events:         p.events,
		Peak:           p.totalPeak,
		SampleEvery:    p.every,
		Timeline:       timeline,
		OOMs:           slices.Clone(p.ooms),
		OOMsDropped:    p.oomsDropped,
		Retries:        slices.Clone(p.retries),
		RetriesDropped: p.retriesDropped,
	}
	if len(p.order) == 1 {
		prof.PeakDetail = p.detail.window()
	}
	if prof.Retries == nil {
		prof.Retries = []Retry{}
	}
	prof.Markers, prof.MarkersDropped = p.finishMarkers()
	prof.Total = figures(&p.total, p.totalPeak)
	for _, d := range p.devs {
		if d == nil {
			continue
		}
		dp := DeviceProfile{Index: d.index, Figures: figures(&d.counters, d.peak), Peak: d.peak}
		st := d.a.Stats()
		dp.AllocRetries, dp.OOMs = st.NumAllocRetries, st.NumOOMs
		if d.proc != nil {
			c := d.proc.Counters()
			c.Sub(d.baseline)
			dp.DeviceMallocs = c.Get(gpu.CallMalloc).Calls
			dp.DeviceFrees = c.Get(gpu.CallFree).Calls
			dp.DeviceMaps = c.Get(gpu.CallMap).Calls
			dp.DeviceUnmaps = c.Get(gpu.CallUnmap).Calls
			dp.DeviceTimeNS = int64(c.Total.Time)
			if ds, ok := d.proc.(replay.Describer); ok {
				dp.DeviceTimeMeasured = ds.Info().MeasuredTime
			}
		}
		t := &prof.Total
		t.AllocRetries += dp.AllocRetries
		t.OOMs += dp.OOMs
		t.DeviceMallocs += dp.DeviceMallocs
		t.DeviceFrees += dp.DeviceFrees
		t.DeviceMaps += dp.DeviceMaps
		t.DeviceUnmaps += dp.DeviceUnmaps
		t.DeviceTimeNS += dp.DeviceTimeNS
		t.DeviceTimeMeasured = t.DeviceTimeMeasured || dp.DeviceTimeMeasured
		prof.Devices = append(prof.Devices, dp)
	}
	sort.Slice(prof.Devices, func(i, j int) bool { return prof.Devices[i].Index < prof.Devices[j].Index })
	prof.Sites = p.sites()
	return prof
}

func figures(c *counters, peak *Capture) Figures {
	f := Figures{
		PeakLiveBytes: c.peakLive, PeakLiveEvent: c.peakLiveEvent,
		PeakReservedBytes: c.peakReserved, PeakReservedEvent: c.peakReservedEvent,
		ReservedBytesAtPeak: c.reservedAtPeak, RequestedBytesAtPeak: c.requestedAtPeak,
		InternalWasteBytesAtPeak: sub(c.peakLive, c.requestedAtPeak),
		MaxInternalWasteBytes:    c.maxInternal,
		MaxExternalFragmentation: c.maxFrag,
		Allocs:                   c.allocs, Frees: c.frees,
		FinalLiveBytes: c.live, FinalReservedBytes: c.reserved, FinalRequestedBytes: c.requested,
	}
	if c.peakReserved > 0 {
		f.WasteRatio = 1 - float64(c.peakLive)/float64(c.peakReserved)
	}
	if peak != nil {
		f.FreeBytesAtPeak = peak.FreeBytes
		f.LargestFreeBlockBytesAtPeak = peak.LargestFreeBlockBytes
		f.StrandedBytesAtPeak = peak.StrandedBytes
		f.ExternalFragmentationAtPeak = peak.ExternalFragmentation
	}
	return f
}

// sites builds the whole-run site table: counters summed over devices, the
// bytes at the total peak from its capture.
func (p *Profiler) sites() []Site {
	n := 0
	for _, d := range p.order {
		n = max(n, len(d.sites))
	}
	byStack := map[trace.StackID]*Site{}
	get := func(id trace.StackID) *Site {
		s := byStack[id]
		if s == nil {
			s = &Site{Stack: id}
			byStack[id] = s
		}
		return s
	}
	for id := 0; id < n; id++ {
		for _, d := range p.order {
			if id >= len(d.sites) {
				continue
			}
			sc := &d.sites[id]
			if sc.allocs == 0 && sc.maxLive == 0 {
				continue
			}
			s := get(trace.StackID(id))
			s.AllocCount += sc.allocs
			s.AllocBytes += sc.allocBytes
			s.MaxLiveBytes = max(s.MaxLiveBytes, sc.maxLive)
		}
	}
	if p.totalPeak != nil {
		for _, sb := range p.totalPeak.Sites {
			s := get(sb.Stack)
			s.LiveBytesAtPeak += sb.LiveBytes
			s.StrandedBytesAtPeak += sb.StrandedBytes
			s.BlocksAtPeak += sb.Blocks
		}
	}
	out := make([]Site, 0, len(byStack))
	var sf *siteFrames
	for _, s := range byStack {
		if p.stacks == nil || int(s.Stack) >= p.stacks.NumStacks() {
			s.Label = SiteLabel(nil)
		} else {
			if sf == nil {
				sf = newSiteFrames(p.stacks)
			}
			s.Label, s.Frames = sf.site(s.Stack)
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if x, y := a.LiveBytesAtPeak+a.StrandedBytesAtPeak, b.LiveBytesAtPeak+b.StrandedBytesAtPeak; x != y {
			return x > y
		}
		if a.AllocBytes != b.AllocBytes {
			return a.AllocBytes > b.AllocBytes
		}
		return a.Stack < b.Stack
	})
	return out
}

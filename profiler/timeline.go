package profiler

// sample appends the timeline point for the interval ending at event index
// and, when the timeline is full, halves it. While the trace's length is
// not known, the point is a fine one (length.go).
func (p *Profiler) sample(index int64) {
	s := p.measure(index)
	if p.bounds != nil {
		p.addFine(s)
		p.nextSample = p.nextFine(index)
		return
	}
	if p.hasCarry {
		s = merge(p.carry, s)
		p.carry, p.hasCarry = Sample{}, false
	}
	p.record(s)
	// Intervals are aligned to multiples of every, so that merged pairs
	// cover adjacent intervals.
	p.nextSample = p.after(index)
}

// after is the event at which the sample after one at index falls.
func (p *Profiler) after(index int64) int64 {
	return ((index+1)/p.every)*p.every + p.every - 1
}

// measure reads the state after event index for a sample, and starts the
// next interval's maxima.
func (p *Profiler) measure(index int64) Sample {
	s := Sample{Event: index, TimeUS: p.lastTime, LiveBytes: p.total.live, ReservedBytes: p.total.reserved,
		RequestedBytes: p.total.requested, MaxLiveBytes: max(p.total.winLive, p.total.live),
		MaxReservedBytes: max(p.total.winReserved, p.total.reserved)}
	multi := len(p.order) > 1
	if multi {
		s.Devices = make([]DeviceSample, 0, len(p.order))
	}
	for _, d := range p.order {
		free, largest := d.a.FreeSummary()
		s.FreeBytes += free
		s.LargestFreeBlock = max(s.LargestFreeBlock, largest)
		if multi {
			s.Devices = append(s.Devices, DeviceSample{Index: d.index, LiveBytes: d.live, ReservedBytes: d.reserved,
				MaxLiveBytes: max(d.winLive, d.live), MaxReservedBytes: max(d.winReserved, d.reserved),
				RequestedBytes: d.requested, FreeBytes: free, LargestFreeBlock: largest})
		}
		d.winLive, d.winReserved = d.live, d.reserved
	}
	s.ExternalFragmentation = fragmentation(s.FreeBytes, s.LargestFreeBlock)
	p.total.winLive, p.total.winReserved = p.total.live, p.total.reserved
	return s
}

// record appends s to the timeline, its fragmentation to the maxima (the
// device's own: that of the one device, or each device's part), and
// halves the timeline when it is full.
func (p *Profiler) record(s Sample) {
	if s.Devices == nil {
		if len(p.order) > 0 {
			// One device (or none, whose fragmentation is 0) when s was
			// measured: the first attached.
			p.order[0].noteFrag(s.ExternalFragmentation)
		}
	} else {
		for _, ds := range s.Devices {
			p.devs[ds.Index].noteFrag(fragmentation(ds.FreeBytes, ds.LargestFreeBlock))
		}
	}
	p.total.noteFrag(s.ExternalFragmentation)
	if p.timeline == nil && p.timelineCap > 0 {
		p.timeline = make([]Sample, 0, p.timelineCap)
	}
	if p.timelineGiven {
		p.timeline = append(make([]Sample, 0, cap(p.timeline)), p.timeline...)
		p.timelineGiven = false
	}
	p.timeline = append(p.timeline, s)
	if len(p.timeline) >= p.opts.MaxSamples {
		p.thin()
	}
}

// thin merges neighbouring samples pairwise and doubles the interval. A
// merged sample keeps the later one's instantaneous values and the larger
// maxima.
func (p *Profiler) thin() {
	t := p.timeline
	n := 0
	for i := 0; i < len(t); i += 2 {
		if i+1 == len(t) {
			t[n] = t[i]
		} else {
			t[n] = merge(t[i], t[i+1])
		}
		n++
	}
	clear(t[n:])
	p.timeline = t[:n]
	p.every *= 2
}

func merge(a, b Sample) Sample {
	b.MaxLiveBytes = max(a.MaxLiveBytes, b.MaxLiveBytes)
	b.MaxReservedBytes = max(a.MaxReservedBytes, b.MaxReservedBytes)
	for i := range b.Devices {
		for _, ad := range a.Devices {
			if ad.Index == b.Devices[i].Index {
				b.Devices[i].MaxLiveBytes = max(ad.MaxLiveBytes, b.Devices[i].MaxLiveBytes)
				b.Devices[i].MaxReservedBytes = max(ad.MaxReservedBytes, b.Devices[i].MaxReservedBytes)
			}
		}
	}
	return b
}

package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/memreplay/memreplay/profiler"
)

// The document embedded in the page (see html.go). Keys are snake_case
// like the JSON report's.

type htmlData struct {
	Runs []htmlRun `json:"runs"`
	// Best is the index of the run with the fewest OOMs and then the
	// lowest peak reserved, when there are several runs of one trace under
	// different settings and no other run ties with it; null otherwise.
	Best *int `json:"best"`
	// Tied lists the runs that share the best figures when there are
	// several (Best is then null); empty otherwise.
	Tied []int `json:"tied"`
	// SameSetting: there are several runs of one trace and all replay the
	// same allocator settings (e.g. the recorded ones and the same string
	// given again), so there is nothing to choose between.
	SameSetting bool `json:"same_setting"`
	// SameTrace: every run replays the same trace (under its settings).
	SameTrace   bool     `json:"same_trace"`
	MultiDevice bool     `json:"multi_device"`
	PAR         *htmlPAR `json:"par"`
	// Version numbers the document's shape.
	Version int `json:"version"`
}

type htmlRun struct {
	ID    int    `json:"id"`
	Label string `json:"label"`
	// Report is the JSON report of the run (WriteJSON's object) without
	// its timeline, which is in Timeline as columns.
	Report      *jsonReport   `json:"report"`
	Timeline    htmlTimeline  `json:"timeline"`
	SampleEvery int64         `json:"sample_every"`
	PeakEvent   int64         `json:"peak_event"` // -1: the initial state or none
	PeakLive    uint64        `json:"peak_live"`
	OOMs        []htmlOOM     `json:"ooms"`
	Captures    []htmlCapture `json:"captures"`
	// Sites has every site the page names: the top lists' and the
	// captures' blocks', by stack ID.
	Sites map[string]htmlSite `json:"sites"`
	// TopLive and TopWaste list stack IDs: sites by live bytes at the
	// peak and by stranded bytes at the peak. ColoredSites are the sites
	// the segment map colours (the largest holders).
	TopLive      []uint32 `json:"top_live"`
	TopWaste     []uint32 `json:"top_waste"`
	ColoredSites []uint32 `json:"colored_sites"`
}

// htmlTimeline is profiler.Sample as columns: a third of the size of an
// array of objects, and what the drawing code wants.
type htmlTimeline struct {
	Event       []int64  `json:"event"`
	TimeUS      []int64  `json:"time_us"`
	Live        []uint64 `json:"live"`
	MaxLive     []uint64 `json:"max_live"`
	Requested   []uint64 `json:"requested"`
	Reserved    []uint64 `json:"reserved"`
	MaxReserved []uint64 `json:"max_reserved"`
	Free        []uint64 `json:"free"`
	LargestFree []uint64 `json:"largest_free"`
	// Devices has each device's own columns when the run used several
	// (the columns above are their sums); empty otherwise.
	Devices []htmlDeviceTimeline `json:"devices"`
	// Detail is the range [from, to) of the columns that hold the state
	// after every event around the peak (profiler.Profile.PeakDetail) in
	// place of the samples there; their free and largest_free read 0 (not
	// measured per event). [0, 0]: none.
	Detail [2]int `json:"detail"`
}

// htmlDeviceTimeline is one device's share of the timeline's samples.
type htmlDeviceTimeline struct {
	Index       int32    `json:"index"`
	Live        []uint64 `json:"live"`
	MaxLive     []uint64 `json:"max_live"`
	Requested   []uint64 `json:"requested"`
	Reserved    []uint64 `json:"reserved"`
	MaxReserved []uint64 `json:"max_reserved"`
}

type htmlOOM struct {
	Event    int64  `json:"event"`
	Device   int32  `json:"device"`
	Size     uint64 `json:"size"`
	Recorded bool   `json:"recorded"`
	Message  string `json:"message"`
}

type htmlCapture struct {
	Title                 string                   `json:"title"`
	Kind                  string                   `json:"kind"` // "peak" or "oom"
	Event                 int64                    `json:"event"`
	LiveBytes             uint64                   `json:"live_bytes"`
	ReservedBytes         uint64                   `json:"reserved_bytes"`
	FreeBytes             uint64                   `json:"free_bytes"`
	StrandedBytes         uint64                   `json:"stranded_bytes"`
	LargestFreeBlockBytes uint64                   `json:"largest_free_block_bytes"`
	Segments              []profiler.SegmentLayout `json:"segments"`
	// Truncated: the capture had more than MaxMapBlocks blocks and
	// Segments stops before them.
	Truncated bool `json:"truncated"`
}

type htmlSite struct {
	Stack uint32 `json:"stack"`
	// Name is the short name the tables use (siteNames), Label the
	// profiler's SiteLabel, Frames the trimmed frames innermost first.
	Name                string   `json:"name"`
	Label               string   `json:"label"`
	Frames              []string `json:"frames"`
	LiveBytesAtPeak     uint64   `json:"live_bytes_at_peak"`
	StrandedBytesAtPeak uint64   `json:"stranded_bytes_at_peak"`
	AllocCount          uint64   `json:"alloc_count"`
	AllocBytes          uint64   `json:"alloc_bytes"`
	MaxLiveBytes        uint64   `json:"max_live_bytes"`
}

type htmlPAR struct {
	Title          string       `json:"title"`
	Settings       []string     `json:"settings"`
	K              []int        `json:"k"`
	POOM           [][]*float64 `json:"p_oom"`
	Throughput     [][]*float64 `json:"throughput"`
	ThroughputUnit string       `json:"throughput_unit"`
	Saturation     []int        `json:"saturation"`
	Notes          []string     `json:"notes"`
}

// maxSiteFrames bounds the frames kept per site for the page's hovers and
// tables.
const maxSiteFrames = 16

// coloredSites is how many sites the segment map colours.
const coloredSites = 8

func buildHTMLData(r *HTMLReport) (*htmlData, error) {
	if len(r.Runs) == 0 && r.PAR == nil {
		return nil, fmt.Errorf("report: nothing to draw: no runs and no PAR section")
	}
	d := &htmlData{Runs: []htmlRun{}, Tied: []int{}, Version: 1}
	for i, run := range r.Runs {
		if run.Input == nil {
			return nil, fmt.Errorf("report: run %d (%s) has no input", i, run.Label)
		}
		hr := buildHTMLRun(i, run)
		// Devices that hold nothing are only counted (empty_devices): the
		// page is of several devices when several hold something.
		if len(hr.Report.Devices) > 1 {
			d.MultiDevice = true
		}
		d.Runs = append(d.Runs, hr)
	}
	d.SameTrace = sameTrace(r.Runs)
	if len(d.Runs) > 1 && d.SameTrace {
		d.SameSetting = sameSetting(r.Runs)
		best, tied := bestRun(r.Runs)
		switch {
		case d.SameSetting:
		case len(tied) > 1:
			d.Tied = tied
		default:
			d.Best = &best
		}
	}
	if r.PAR != nil {
		if err := r.PAR.validate(); err != nil {
			return nil, err
		}
		d.PAR = parData(r.PAR)
	}
	return d, nil
}

// sameTrace tells whether the runs replay one trace: the same file and
// the same number of events.
func sameTrace(runs []HTMLRun) bool {
	if len(runs) < 2 {
		return true
	}
	for _, r := range runs[1:] {
		a, b := runs[0].Input, r.Input
		if traceLabel(a.Trace) != traceLabel(b.Trace) || events(a) != events(b) {
			return false
		}
	}
	return true
}

func events(in *Input) int64 {
	if in.Result != nil {
		return in.Result.Events
	}
	if in.Profile != nil {
		return in.Profile.Events
	}
	return 0
}

// sameSetting tells whether every run replays the same allocator
// settings (Config.String, which prints each setting that differs from
// PyTorch's defaults).
func sameSetting(runs []HTMLRun) bool {
	for _, r := range runs[1:] {
		if configString(r.Input.Result) != configString(runs[0].Input.Result) {
			return false
		}
	}
	return true
}

// bestRun picks the run with the fewest OOMs, then the lowest peak
// reserved: the setting that would have saved the most memory without
// failing more often. tied lists every run with those two figures, best
// among them.
func bestRun(runs []HTMLRun) (best int, tied []int) {
	fs := make([]profiler.Figures, len(runs))
	for i, run := range runs {
		fs[i] = figures(run.Input.Result, run.Input.Profile)
		if f, b := fs[i], fs[best]; f.OOMs < b.OOMs || f.OOMs == b.OOMs && f.PeakReservedBytes < b.PeakReservedBytes {
			best = i
		}
	}
	for i, f := range fs {
		if f.OOMs == fs[best].OOMs && f.PeakReservedBytes == fs[best].PeakReservedBytes {
			tied = append(tied, i)
		}
	}
	return best, tied
}

func buildHTMLRun(id int, run HTMLRun) htmlRun {
	in := run.Input
	rep := buildJSON(in)
	rep.Timeline = nil // as columns below
	hr := htmlRun{ID: id, Label: run.Label, Report: rep, OOMs: []htmlOOM{},
		Captures: []htmlCapture{}, Sites: map[string]htmlSite{}, TopLive: []uint32{}, TopWaste: []uint32{},
		ColoredSites: []uint32{}, PeakEvent: -1}
	if hr.Label == "" {
		hr.Label = configLabel(in.Result)
	}
	prof := in.Profile
	hr.Timeline = timelineColumns(prof)
	if res := in.Result; res != nil {
		for _, o := range res.OOMs {
			hr.OOMs = append(hr.OOMs, htmlOOM{Event: o.Index, Device: o.Device, Size: o.Size, Recorded: o.Recorded, Message: o.Message})
		}
	}
	if prof == nil {
		return hr
	}
	hr.SampleEvery = prof.SampleEvery
	hr.PeakEvent, hr.PeakLive = prof.Total.PeakLiveEvent, prof.Total.PeakLiveBytes
	sites := siteTable(prof)
	// named are the profile's sites the page names, in the order met:
	// they are named together at the end, so that two reading the same
	// get the table's "[stack N]" (siteNames).
	var named []profiler.Site
	addSite := func(id uint32) {
		key := strconv.FormatUint(uint64(id), 10)
		if _, ok := hr.Sites[key]; ok {
			return
		}
		hs := htmlSite{Stack: id, Name: "<no stack>", Label: "<no stack>", Frames: []string{}}
		if s := sites[id]; s != nil {
			hs = htmlSite{Stack: id, Label: s.Label, Frames: s.Frames, LiveBytesAtPeak: s.LiveBytesAtPeak,
				StrandedBytesAtPeak: s.StrandedBytesAtPeak, AllocCount: s.AllocCount, AllocBytes: s.AllocBytes, MaxLiveBytes: s.MaxLiveBytes}
			if len(hs.Frames) > maxSiteFrames {
				hs.Frames = hs.Frames[:maxSiteFrames]
			}
			if hs.Frames == nil {
				hs.Frames = []string{}
			}
			named = append(named, *s)
		}
		hr.Sites[key] = hs
	}
	for _, s := range sitesByLive(prof, in.top()) {
		hr.TopLive = append(hr.TopLive, uint32(s.Stack))
		addSite(uint32(s.Stack))
	}
	for _, s := range sitesByStranded(prof, in.top()) {
		hr.TopWaste = append(hr.TopWaste, uint32(s.Stack))
		addSite(uint32(s.Stack))
	}
	// Blocks without a recorded stack (site 0: often the state rebuilt
	// before a partial trace) stay plain.
	for _, s := range sitesByLive(prof, coloredSites+1) {
		if s.LiveBytesAtPeak > 0 && s.Stack != 0 && len(hr.ColoredSites) < coloredSites {
			hr.ColoredSites = append(hr.ColoredSites, uint32(s.Stack))
		}
	}
	// Several devices: each device at its own peak first, then all of
	// them at the peak of their sum.
	if len(prof.Devices) > 1 {
		for _, d := range prof.Devices {
			if d.Peak != nil {
				title := fmt.Sprintf("device %d: peak live (%s)", d.Index, event(d.Peak.Event))
				hr.Captures = append(hr.Captures, captureData(d.Peak, "peak", title, addSite))
			}
		}
	}
	if c := prof.Peak; c != nil {
		title := "peak live (" + event(c.Event) + ")"
		if len(prof.Devices) > 1 {
			title = fmt.Sprintf("all %d devices: peak of their summed live bytes (%s)", len(prof.Devices), event(c.Event))
		}
		hr.Captures = append(hr.Captures, captureData(c, "peak", title, addSite))
	}
	for _, o := range prof.OOMs {
		if o.Capture == nil {
			continue
		}
		title := fmt.Sprintf("OOM at event %d (%s requested)", o.Event, size(o.RequestedBytes))
		hr.Captures = append(hr.Captures, captureData(o.Capture, "oom", title, addSite))
	}
	for i, name := range siteNames(in, named) {
		key := strconv.FormatUint(uint64(named[i].Stack), 10)
		hs := hr.Sites[key]
		hs.Name = name
		hr.Sites[key] = hs
	}
	return hr
}

func captureData(c *profiler.Capture, kind, title string, addSite func(uint32)) htmlCapture {
	hc := htmlCapture{Title: title, Kind: kind, Event: c.Event, LiveBytes: c.LiveBytes, ReservedBytes: c.ReservedBytes,
		FreeBytes: c.FreeBytes, StrandedBytes: c.StrandedBytes, LargestFreeBlockBytes: c.LargestFreeBlockBytes,
		Segments: []profiler.SegmentLayout{}}
	blocks := 0
	for _, s := range c.Layout {
		if blocks+len(s.Blocks) > MaxMapBlocks {
			hc.Truncated = true
			break
		}
		blocks += len(s.Blocks)
		for _, b := range s.Blocks {
			if b.Allocated {
				addSite(uint32(b.Stack))
			}
		}
		hc.Segments = append(hc.Segments, s)
	}
	return hc
}

// timelineColumns is the profile's timeline as columns, with the points
// of the peak's window in place of the samples there (detailSplice). The
// columns are carved from two arrays and filled straight from the samples
// and the points: the merged timeline (36,000 samples of 120 bytes on a
// long trace) is never made.
func timelineColumns(prof *profiler.Profile) htmlTimeline {
	var t htmlTimeline
	var samples []profiler.Sample
	var detail []profiler.DetailPoint
	i, j := 0, 0 // the rows are samples[:i], detail, samples[j:]
	if prof != nil {
		samples = prof.Timeline
		if len(prof.PeakDetail) > 0 {
			i, j, detail = detailSplice(samples, prof.PeakDetail)
		}
	}
	if len(detail) > 0 {
		t.Detail = [2]int{i, i + len(detail)}
	}
	n := i + len(detail) + len(samples) - j
	ints, uints := make([]int64, 2*n), make([]uint64, 7*n)
	next := func() []uint64 {
		c := uints[:n:n]
		uints = uints[n:]
		return c
	}
	t.Event, t.TimeUS = ints[:n:n], ints[n:]
	t.Live, t.MaxLive, t.Requested = next(), next(), next()
	t.Reserved, t.MaxReserved = next(), next()
	t.Free, t.LargestFree = next(), next()
	t.Devices = []htmlDeviceTimeline{}
	// A device's column is its entry in each sample's Devices, by index
	// (every sample of a multi-device run lists the devices attached when
	// it was taken; a device attached later reads 0 before, and so do the
	// window's points, which have no devices).
	col := map[int32]int{}
	row := 0
	sample := func(s *profiler.Sample) {
		t.Event[row], t.TimeUS[row] = s.Event, s.TimeUS
		t.Live[row], t.MaxLive[row], t.Requested[row] = s.LiveBytes, s.MaxLiveBytes, s.RequestedBytes
		t.Reserved[row], t.MaxReserved[row] = s.ReservedBytes, s.MaxReservedBytes
		t.Free[row], t.LargestFree[row] = s.FreeBytes, s.LargestFreeBlock
		for _, d := range s.Devices {
			k, ok := col[d.Index]
			if !ok {
				k = len(t.Devices)
				col[d.Index] = k
				t.Devices = append(t.Devices, htmlDeviceTimeline{Index: d.Index, Live: make([]uint64, n), MaxLive: make([]uint64, n),
					Requested: make([]uint64, n), Reserved: make([]uint64, n), MaxReserved: make([]uint64, n)})
			}
			dt := &t.Devices[k]
			dt.Live[row], dt.MaxLive[row], dt.Requested[row] = d.LiveBytes, d.MaxLiveBytes, d.RequestedBytes
			dt.Reserved[row], dt.MaxReserved[row] = d.ReservedBytes, d.MaxReservedBytes
		}
		row++
	}
	for k := range samples[:i] {
		sample(&samples[k])
	}
	// A point is a sample of one event: its maxima are its values; free
	// and largest_free are not measured per event (0).
	for k := range detail {
		d := &detail[k]
		t.Event[row], t.TimeUS[row] = d.Event, d.TimeUS
		t.Live[row], t.MaxLive[row], t.Requested[row] = d.LiveBytes, d.LiveBytes, d.RequestedBytes
		t.Reserved[row], t.MaxReserved[row] = d.ReservedBytes, d.ReservedBytes
		row++
	}
	for k := range samples[j:] {
		sample(&samples[j+k])
	}
	slices.SortFunc(t.Devices, func(a, b htmlDeviceTimeline) int { return int(a.Index) - int(b.Index) })
	return t
}

// detailSplice says where the points of the peak's window go in place of
// the samples that end inside it: zoomed into the peak, the page draws
// every event. A sample is drawn at the end of its interval with the
// maxima over it, so no sample's interval may lose events to the window:
// the first sample ending inside it, when its interval begins before the
// window, stays, and the points up to its end are left out; the sample
// after the window keeps its maxima over its whole interval. The timeline
// is then samples[:i], the points kept, samples[j:]; no points kept: i and
// j are 0, the samples stay whole.
func detailSplice(samples []profiler.Sample, detail []profiler.DetailPoint) (i, j int, kept []profiler.DetailPoint) {
	first, last := detail[0].Event, detail[len(detail)-1].Event
	i = sort.Search(len(samples), func(i int) bool { return samples[i].Event >= first })
	if i < len(samples) && samples[i].Event <= last {
		start := int64(0) // the first event of sample i's interval
		if i > 0 {
			start = samples[i-1].Event + 1
		}
		if start < first {
			detail = detail[samples[i].Event-first+1:]
			i++
		}
	}
	if len(detail) == 0 {
		return 0, 0, nil
	}
	j = sort.Search(len(samples), func(j int) bool { return samples[j].Event > last })
	return i, j, detail
}

func parData(p *PARSection) *htmlPAR {
	grid := func(g [][]float64) [][]*float64 {
		out := make([][]*float64, len(g))
		for i, row := range g {
			out[i] = make([]*float64, len(row))
			for j, v := range row {
				if !math.IsNaN(v) {
					v := v
					out[i][j] = &v
				}
			}
		}
		return out
	}
	notes := p.Notes
	if notes == nil {
		notes = []string{}
	}
	return &htmlPAR{Title: p.Title, Settings: p.Settings, K: p.K, POOM: grid(p.POOM), Throughput: grid(p.Throughput),
		ThroughputUnit: p.ThroughputUnit, Saturation: p.Saturation, Notes: notes}
}

package report

import (
	"encoding/json"
	"io"
	"sort"
	"time"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
)

// The JSON shapes. They are structs rather than maps so that the keys come
// out in a fixed, readable order.

type jsonReport struct {
	Source         string              `json:"source"`
	File           string              `json:"file"`
	Events         int64               `json:"events"`
	Config         string              `json:"config"`
	ConfigSource   string              `json:"config_source"`
	Policy         string              `json:"policy"`
	Capacity       uint64              `json:"capacity"`
	CapacitySource string              `json:"capacity_source"`
	Stopped        bool                `json:"stopped"`
	StoppedAt      *int64              `json:"stopped_at"`
	Skipped        int64               `json:"skipped"`
	Stats          map[string]int64    `json:"stats"`
	Fragmentation  jsonFragmentation   `json:"fragmentation"`
	DeviceCalls    jsonCalls           `json:"device_calls"`
	Check          *jsonCheck          `json:"check,omitempty"`
	StatsCheck     *jsonStatsCheck     `json:"stats_check,omitempty"`
	OOMs           []jsonOOM           `json:"ooms"`
	Retries        []profiler.Retry    `json:"retries"`
	Markers        []profiler.Marker   `json:"markers,omitempty"`         // the trace's record_function annotations (none: left out)
	MarkersDropped int64               `json:"markers_dropped,omitempty"` // annotations beyond those listed (none: left out)
	Reconstructed  *jsonReconstruction `json:"reconstructed"`
	TopSites       []jsonSite          `json:"top_sites"`
	TopStranding   []jsonSite          `json:"top_stranding_sites"`
	Devices        []jsonDevice        `json:"devices"`
	EmptyDevices   jsonEmptyDevices    `json:"empty_devices"`
	SampleEvery    int64               `json:"sample_every"`
	Timeline       []profiler.Sample   `json:"timeline"`
	Notes          []string            `json:"notes"`
}

type jsonFragmentation struct {
	PeakLiveBytes uint64 `json:"peak_live_bytes"`
	// The events are -1 for the restored initial state, null when unknown
	// (a replay without the profiler).
	PeakLiveEvent               *int64  `json:"peak_live_event"`
	PeakReservedBytes           uint64  `json:"peak_reserved_bytes"`
	PeakReservedEvent           *int64  `json:"peak_reserved_event"`
	WasteRatio                  float64 `json:"waste_ratio"`
	LargestFreeBlockBytesAtPeak uint64  `json:"largest_free_block_bytes_at_peak"`
	FreeBytesAtPeak             uint64  `json:"free_bytes_at_peak"`
	ReservedBytesAtPeak         uint64  `json:"reserved_bytes_at_peak"`
	StrandedBytesAtPeak         uint64  `json:"stranded_bytes_at_peak"`
	InternalWasteBytesAtPeak    uint64  `json:"internal_waste_bytes_at_peak"`
	ExternalFragmentationAtPeak float64 `json:"external_fragmentation_at_peak"`
	MaxInternalWasteBytes       uint64  `json:"max_internal_waste_bytes"`
	MaxExternalFragmentation    float64 `json:"max_external_fragmentation"`
}

type jsonCalls struct {
	Mallocs      uint64 `json:"cuda_malloc"`
	Frees        uint64 `json:"cuda_free"`
	Maps         uint64 `json:"cu_mem_map"`
	Unmaps       uint64 `json:"cu_mem_unmap"`
	AllocRetries int64  `json:"alloc_retries"`
	OOMs         int64  `json:"ooms"`
	// The device calls' time: modelled_time_ns on the simulated GPU (the
	// sim's cost model), measured_time_ns on a real one (wall time around
	// the driver calls); the other is 0, and time_source says which.
	TimeNS         int64  `json:"modelled_time_ns"`
	MeasuredTimeNS int64  `json:"measured_time_ns"`
	TimeSource     string `json:"time_source"`
}

// callsSummary is the device_calls object of f.
func callsSummary(f *profiler.Figures) jsonCalls {
	c := jsonCalls{Mallocs: f.DeviceMallocs, Frees: f.DeviceFrees, Maps: f.DeviceMaps, Unmaps: f.DeviceUnmaps,
		AllocRetries: f.AllocRetries, OOMs: f.OOMs, TimeSource: timeSource(f.DeviceTimeMeasured)}
	if f.DeviceTimeMeasured {
		c.MeasuredTimeNS = f.DeviceTimeNS
	} else {
		c.TimeNS = f.DeviceTimeNS
	}
	return c
}

type jsonCheck struct {
	DecisionsExpected  int64           `json:"decisions_expected"`
	DecisionsMatched   int64           `json:"decisions_matched"`
	Passed             *bool           `json:"passed"` // null when there is nothing to check
	NothingToCheck     bool            `json:"nothing_to_check,omitempty"`
	FirstDivergence    *jsonDivergence `json:"first_divergence"`
	FinalSegmentsMatch *bool           `json:"final_segments_match"`
	FinalDifference    string          `json:"final_difference,omitempty"`
}

// jsonStatsCheck is replay --expect-stats: the replay's statistics against
// the recording process's torch.cuda.memory_stats().
type jsonStatsCheck struct {
	File            string         `json:"file"`
	Device          int32          `json:"device"`
	Passed          bool           `json:"passed"`
	Exact           int            `json:"exact_compared"`
	ExactMatched    int            `json:"exact_matched"`
	Inferred        int            `json:"inferred_compared"`
	InferredMatched int            `json:"inferred_matched"`
	Stopped         bool           `json:"replay_stopped"`
	Differences     []jsonStatDiff `json:"differences"`
	NotCompared     []jsonStatSkip `json:"not_compared"`
}

type jsonStatDiff struct {
	Key      string `json:"key"`
	Recorded int64  `json:"recorded"`
	Replayed int64  `json:"replayed"`
	Exact    bool   `json:"exact"`
	Why      string `json:"why,omitempty"`
}

type jsonStatSkip struct {
	Key string `json:"key"`
	Why string `json:"why"`
}

func statsCheckJSON(c *replay.StatsCheck) *jsonStatsCheck {
	if c == nil {
		return nil
	}
	out := &jsonStatsCheck{File: c.File, Device: c.Device, Passed: c.Passed(), Exact: c.Exact,
		ExactMatched: c.ExactMatched, Inferred: c.Inferred, InferredMatched: c.InferredMatched, Stopped: c.Stopped,
		Differences: []jsonStatDiff{}, NotCompared: []jsonStatSkip{}}
	for _, d := range c.Differences {
		out.Differences = append(out.Differences, jsonStatDiff{Key: d.Key, Recorded: d.Recorded, Replayed: d.Replayed,
			Exact: d.Exact, Why: d.Why})
	}
	for _, s := range c.NotCompared {
		out.NotCompared = append(out.NotCompared, jsonStatSkip{Key: s.Key, Why: s.Why})
	}
	return out
}

type jsonDivergence struct {
	Event    int64  `json:"event"`
	Device   int32  `json:"device"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
}

type jsonOOM struct {
	Event    int64  `json:"event"`
	Device   int32  `json:"device"`
	Size     uint64 `json:"size"`
	Recorded bool   `json:"recorded"`
	Message  string `json:"message"`
	// From the profiler, when it saw the OOM.
	State *profiler.OOMSnapshot `json:"state,omitempty"`
}

type jsonReconstruction struct {
	Segments      int      `json:"segments"`
	SegmentBytes  uint64   `json:"segment_bytes"`
	LiveBlocks    int      `json:"live_blocks"`
	LiveBytes     uint64   `json:"live_bytes"`
	Unresolved    int      `json:"unresolved"`
	InferredSizes int      `json:"inferred_sizes"`
	Notes         []string `json:"notes"`
}

func reconstructionJSON(rc *replay.Reconstruction) *jsonReconstruction {
	notes := rc.Notes
	if notes == nil {
		notes = []string{}
	}
	return &jsonReconstruction{Segments: rc.Segments, SegmentBytes: rc.SegmentBytes,
		LiveBlocks: rc.LiveBlocks, LiveBytes: rc.LiveBytes, Unresolved: rc.Unresolved,
		InferredSizes: rc.InferredSizes, Notes: notes}
}

type jsonSite struct {
	Stack               uint32   `json:"stack"`
	Label               string   `json:"label"`
	Frames              []string `json:"frames"`
	LiveBytesAtPeak     uint64   `json:"live_bytes_at_peak"`
	StrandedBytesAtPeak uint64   `json:"stranded_bytes_at_peak"`
	BlocksAtPeak        int      `json:"blocks_at_peak"`
	AllocCount          uint64   `json:"alloc_count"`
	AllocBytes          uint64   `json:"alloc_bytes"`
	MaxLiveBytes        uint64   `json:"max_live_bytes"`
}

type jsonDevice struct {
	Index          int32  `json:"index"`
	Capacity       uint64 `json:"capacity"`
	CapacitySource string `json:"capacity_source"`
	// Name names a real GPU ("NVIDIA H200, cuda:0"); "" when simulated.
	Name          string             `json:"name"`
	Stats         map[string]int64   `json:"stats"`
	Fragmentation *jsonFragmentation `json:"fragmentation"`
	// Calls' time_ns are modelled or measured, as TimeSource says.
	Calls      map[string]jsonCallCount `json:"calls"`
	TimeSource string                   `json:"time_source"`
	Peak       *profiler.Capture        `json:"peak"`
}

type jsonCallCount struct {
	Calls    uint64 `json:"calls"`
	Failures uint64 `json:"failures"`
	TimeNS   int64  `json:"time_ns"`
}

func fragmentationJSON(f *profiler.Figures) jsonFragmentation {
	return jsonFragmentation{
		PeakLiveBytes: f.PeakLiveBytes, PeakLiveEvent: eventPtr(f.PeakLiveEvent),
		PeakReservedBytes: f.PeakReservedBytes, PeakReservedEvent: eventPtr(f.PeakReservedEvent),
		WasteRatio:                  f.WasteRatio,
		LargestFreeBlockBytesAtPeak: f.LargestFreeBlockBytesAtPeak,
		FreeBytesAtPeak:             f.FreeBytesAtPeak,
		ReservedBytesAtPeak:         f.ReservedBytesAtPeak,
		StrandedBytesAtPeak:         f.StrandedBytesAtPeak,
		InternalWasteBytesAtPeak:    f.InternalWasteBytesAtPeak,
		ExternalFragmentationAtPeak: f.ExternalFragmentationAtPeak,
		MaxInternalWasteBytes:       f.MaxInternalWasteBytes,
		MaxExternalFragmentation:    f.MaxExternalFragmentation,
	}
}

func eventPtr(i int64) *int64 {
	if i == unknownEvent {
		return nil
	}
	return &i
}

func sitesJSON(sites []profiler.Site) []jsonSite {
	out := make([]jsonSite, 0, len(sites))
	for _, s := range sites {
		frames := s.Frames
		if frames == nil {
			frames = []string{}
		}
		out = append(out, jsonSite{Stack: uint32(s.Stack), Label: s.Label, Frames: frames,
			LiveBytesAtPeak: s.LiveBytesAtPeak, StrandedBytesAtPeak: s.StrandedBytesAtPeak, BlocksAtPeak: s.BlocksAtPeak,
			AllocCount: s.AllocCount, AllocBytes: s.AllocBytes, MaxLiveBytes: s.MaxLiveBytes})
	}
	return out
}

func checkJSON(c *replay.CheckResult) *jsonCheck {
	if c == nil {
		return nil
	}
	out := &jsonCheck{DecisionsExpected: c.DecisionsExpected, DecisionsMatched: c.DecisionsMatched,
		NothingToCheck: c.NothingToCheck, FinalSegmentsMatch: c.FinalSegmentsMatch, FinalDifference: c.FinalDifference}
	if c.NothingToCheck {
		out.FinalSegmentsMatch, out.FinalDifference = nil, ""
	} else {
		passed := c.Passed()
		out.Passed = &passed
	}
	if d := c.FirstDivergence; d != nil {
		out.FirstDivergence = &jsonDivergence{Event: d.Index, Device: d.Device, Expected: d.Expected, Actual: d.Actual}
	}
	return out
}

func buildJSON(in *Input) *jsonReport {
	res, prof := in.Result, in.Profile
	r := &jsonReport{Source: in.Trace.Source, File: in.Trace.SourceFile, Stats: summedStats(res),
		OOMs: []jsonOOM{}, Retries: []profiler.Retry{}, Notes: notes(in), Timeline: []profiler.Sample{}}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	f := figures(res, prof)
	if prof != nil {
		r.SampleEvery = prof.SampleEvery
		if prof.Timeline != nil {
			r.Timeline = prof.Timeline
		}
		if prof.Retries != nil {
			r.Retries = prof.Retries
		}
		r.Markers, r.MarkersDropped = prof.Markers, prof.MarkersDropped
	}
	r.Fragmentation = fragmentationJSON(&f)
	r.DeviceCalls = callsSummary(&f)
	r.TopSites = sitesJSON(sitesByLive(prof, in.top()))
	r.TopStranding = sitesJSON(sitesByStranded(prof, in.top()))
	r.Devices = []jsonDevice{}
	if res != nil {
		r.Events = res.Events
		r.Config, r.ConfigSource = res.Config.String(), res.ConfigSource
		r.Policy = policyName(res)
		r.Capacity, r.CapacitySource = capacity(res)
		r.Stopped, r.Skipped = res.Stopped, res.Skipped
		if res.Stopped {
			at := res.StoppedAt
			r.StoppedAt = &at
		}
		r.Check = checkJSON(res.Check)
		r.StatsCheck = statsCheckJSON(res.StatsCheck)
		for _, o := range res.OOMs {
			r.OOMs = append(r.OOMs, jsonOOM{Event: o.Index, Device: o.Device, Size: o.Size, Recorded: o.Recorded,
				Message: o.Message, State: trimOOM(oomSnapshot(prof, o), in.top())})
		}
		if rc := res.Reconstructed; rc != nil {
			r.Reconstructed = reconstructionJSON(rc)
		}
		kept, idle := splitIdle(res)
		r.EmptyDevices = emptyDevicesJSON(idle)
		if len(idle) > 0 {
			r.Notes = append(r.Notes, deviceList(idle)+": no allocation and nothing reserved; left out of the device figures")
		}
		for i := range kept {
			d := &kept[i]
			jd := jsonDevice{Index: d.Index, Capacity: d.Capacity, CapacitySource: d.CapacitySource, Name: d.Name,
				Stats: d.Stats.Map(), Calls: callsJSON(d.Counters), TimeSource: timeSource(d.TimeMeasured)}
			if dp := deviceProfile(prof, d.Index); dp != nil {
				fr := fragmentationJSON(&dp.Figures)
				jd.Fragmentation, jd.Peak = &fr, trimCapture(dp.Peak, in.top())
			} else if prof != nil {
				// A device the trace names but never uses: nothing to
				// profile, the figures of an empty device.
				f := figures(&replay.Result{Devices: kept[i : i+1]}, nil)
				f.PeakLiveEvent, f.PeakReservedEvent = -1, -1 // its peak is its (empty) start
				fr := fragmentationJSON(&f)
				jd.Fragmentation = &fr
			}
			r.Devices = append(r.Devices, jd)
		}
	} else if prof != nil {
		r.Events = prof.Events
	}
	return r
}

// trimCapture returns c with only its first n sites (they are sorted
// largest first) and without its segment layout (one entry per live
// block), so that the JSON stays readable on traces with thousands of
// stacks; pprof output has every site, the HTML report the layout.
func trimCapture(c *profiler.Capture, n int) *profiler.Capture {
	if c == nil {
		return nil
	}
	cc := *c
	cc.Layout = nil
	if len(cc.Sites) > n {
		cc.Sites = cc.Sites[:n]
	}
	return &cc
}

func trimOOM(o *profiler.OOMSnapshot, n int) *profiler.OOMSnapshot {
	if o == nil {
		return nil
	}
	oo := *o
	oo.Capture = trimCapture(o.Capture, n)
	return &oo
}

func callsJSON(c gpu.Counters) map[string]jsonCallCount {
	out := map[string]jsonCallCount{}
	for _, call := range gpu.Calls() {
		if n := c.Get(call); n.Calls > 0 {
			out[string(call)] = jsonCallCount{Calls: n.Calls, Failures: n.Failures, TimeNS: int64(n.Time / time.Nanosecond)}
		}
	}
	return out
}

func deviceProfile(prof *profiler.Profile, index int32) *profiler.DeviceProfile {
	if prof == nil {
		return nil
	}
	// Looked up once per device: a search, not a walk, for traces that
	// name thousands of devices (Devices is sorted by index).
	ds := prof.Devices
	i := sort.Search(len(ds), func(i int) bool { return ds[i].Index >= index })
	if i < len(ds) && ds[i].Index == index {
		return &ds[i]
	}
	return nil
}

// WriteJSON writes the replay as one indented JSON object (see the package
// comment for its keys).
func WriteJSON(w io.Writer, in *Input) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(buildJSON(in))
}

package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// Input is everything a report shows about one replay.
type Input struct {
	// Trace is the replayed trace's header (source, file, devices, notes).
	Trace  trace.Header
	Result *replay.Result
	// Profile is the profiler's; nil when the replay ran without one (the
	// reports then fall back on the allocator's statistics).
	Profile *profiler.Profile
	// Stacks resolves the profile's StackIDs (pprof needs the frames
	// themselves); may be nil.
	Stacks *trace.Stacks
	// Top is how many sites to list; 0 means DefaultTop.
	Top int
}

// DefaultTop is the number of sites listed when Input.Top is 0.
const DefaultTop = 10

func (in *Input) top() int {
	if in.Top > 0 {
		return in.Top
	}
	return DefaultTop
}

// figures returns the profile's total figures, or what the allocator's
// statistics give without a profile.
func figures(res *replay.Result, prof *profiler.Profile) profiler.Figures {
	if prof != nil {
		return prof.Total
	}
	var f profiler.Figures
	// The statistics keep peaks, not when they happened.
	f.PeakLiveEvent, f.PeakReservedEvent = unknownEvent, unknownEvent
	if res == nil {
		return f
	}
	for _, d := range res.Devices {
		st := &d.Stats
		f.PeakLiveBytes += uint64(max(st.AllocatedBytes[allocator.StatAll].Peak, 0))
		f.PeakReservedBytes += uint64(max(st.ReservedBytes[allocator.StatAll].Peak, 0))
		f.FinalLiveBytes += uint64(max(st.AllocatedBytes[allocator.StatAll].Current, 0))
		f.FinalReservedBytes += uint64(max(st.ReservedBytes[allocator.StatAll].Current, 0))
		f.AllocRetries += st.NumAllocRetries
		f.OOMs += st.NumOOMs
		f.DeviceMallocs += d.Counters.Get(gpu.CallMalloc).Calls
		f.DeviceFrees += d.Counters.Get(gpu.CallFree).Calls
		f.DeviceMaps += d.Counters.Get(gpu.CallMap).Calls
		f.DeviceUnmaps += d.Counters.Get(gpu.CallUnmap).Calls
		f.DeviceTimeNS += int64(d.Counters.Total.Time)
		f.DeviceTimeMeasured = f.DeviceTimeMeasured || d.TimeMeasured
	}
	if f.PeakReservedBytes > 0 {
		f.WasteRatio = 1 - float64(f.PeakLiveBytes)/float64(f.PeakReservedBytes)
	}
	return f
}

// unknownEvent marks a peak whose event is not known (no profile).
const unknownEvent = math.MinInt64

// summedStats flattens the devices' statistics: one device's as they are,
// several summed key by key (see the package comment).
func summedStats(res *replay.Result) map[string]int64 {
	out := map[string]int64{}
	if res == nil {
		return out
	}
	// Devices with the same statistics (the many a trace may name and
	// not use all have a fresh allocator's) are summed as one run:
	// Stats.Map makes a map of every statistic.
	ds := res.Devices
	for i := 0; i < len(ds); {
		j := i + 1
		for j < len(ds) && ds[j].Stats == ds[i].Stats {
			j++
		}
		for k, v := range ds[i].Stats.Map() {
			if k == "max_split_size" {
				if i == 0 {
					out[k] = v
				}
				continue
			}
			out[k] += v * int64(j-i)
		}
		i = j
	}
	return out
}

// capacity returns the first device's capacity and its source.
func capacity(res *replay.Result) (uint64, string) {
	if res == nil || len(res.Devices) == 0 {
		return 0, ""
	}
	return res.Devices[0].Capacity, res.Devices[0].CapacitySource
}

// topSites returns the first n sites ordered by less.
func topSites(prof *profiler.Profile, n int, keep func(*profiler.Site) bool, less func(a, b *profiler.Site) bool) []profiler.Site {
	if prof == nil {
		return nil
	}
	var out []profiler.Site
	for i := range prof.Sites {
		if keep(&prof.Sites[i]) {
			out = append(out, prof.Sites[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return less(&out[i], &out[j]) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// sitesByLive: live bytes at the peak, then bytes allocated over the run.
func sitesByLive(prof *profiler.Profile, n int) []profiler.Site {
	return topSites(prof, n, func(s *profiler.Site) bool { return s.LiveBytesAtPeak > 0 || s.AllocBytes > 0 },
		func(a, b *profiler.Site) bool {
			if a.LiveBytesAtPeak != b.LiveBytesAtPeak {
				return a.LiveBytesAtPeak > b.LiveBytesAtPeak
			}
			if a.AllocBytes != b.AllocBytes {
				return a.AllocBytes > b.AllocBytes
			}
			return a.Stack < b.Stack
		})
}

// sitesByStranded: the sites whose live blocks pinned the most free bytes
// at the peak.
func sitesByStranded(prof *profiler.Profile, n int) []profiler.Site {
	return topSites(prof, n, func(s *profiler.Site) bool { return s.StrandedBytesAtPeak > 0 },
		func(a, b *profiler.Site) bool {
			if a.StrandedBytesAtPeak != b.StrandedBytesAtPeak {
				return a.StrandedBytesAtPeak > b.StrandedBytesAtPeak
			}
			return a.Stack < b.Stack
		})
}

// firstOOM is the event of the replay's first OOM, -1 without one.
func firstOOM(res *replay.Result) int64 {
	if res == nil || len(res.OOMs) == 0 {
		return -1
	}
	return res.OOMs[0].Index
}

// oomSnapshot finds the profile's snapshot of an OOM.
func oomSnapshot(prof *profiler.Profile, o replay.OOM) *profiler.OOMSnapshot {
	if prof == nil {
		return nil
	}
	for i := range prof.OOMs {
		if s := &prof.OOMs[i]; s.Event == o.Index && s.Device == o.Device {
			return s
		}
	}
	return nil
}

// notes collects the remarks a reader should see besides the figures.
func notes(in *Input) []string { return notesFor(in, false) }

// notesFor is notes for a table whose capacity cell already says when the
// one device's capacity is not limited (capacityShown): the note would say
// it a second time, in other words.
func notesFor(in *Input, capacityShown bool) []string {
	var out []string
	res := in.Result
	if res != nil {
		if r := res.Reconstructed; r != nil {
			if len(r.Notes) > 0 {
				// The reconstruction describes itself.
				out = append(out, r.Notes...)
			} else {
				s := fmt.Sprintf("initial state reconstructed: %d segments (%s), %d live blocks (%s)",
					r.Segments, allocator.FormatSize(r.SegmentBytes), r.LiveBlocks, allocator.FormatSize(r.LiveBytes))
				if r.InferredSizes > 0 {
					s += fmt.Sprintf("; %d block sizes inferred from requested sizes", r.InferredSizes)
				}
				if r.Unresolved > 0 {
					s += fmt.Sprintf("; %d blocks in unrestorable expandable runs given a segment of their own", r.Unresolved)
				}
				out = append(out, s)
			}
		}
		if res.Stopped {
			out = append(out, fmt.Sprintf("the replay stopped at event %d (out of memory; --oom %s)", res.StoppedAt, replay.OOMStop))
		}
		if res.Skipped > 0 {
			out = append(out, fmt.Sprintf("%d events skipped", res.Skipped))
			if res.UnknownFrees > 0 {
				what := "frees of addresses"
				if res.UnknownFrees == 1 {
					what = "free of an address"
				}
				out = append(out, fmt.Sprintf("%d %s the trace never allocated (nor its state before the first event explains)", res.UnknownFrees, what))
			}
			out = append(out, res.Problems...)
		}
		// Devices without a capacity share one note (a trace may name
		// many), said once per capacity they were replayed on.
		unlimited := map[uint64][]int32{}
		var caps []uint64
		for _, d := range res.Devices {
			switch {
			case d.CapacitySource == replay.SourceUnknown && d.UnusedCapacity != "":
				out = append(out, fmt.Sprintf("device %d: --check does not use the %s (an estimate: the recording's OOMs recur where they happened, and it could only add others); replayed on %s, which does not run out (--capacity sets one)",
					d.Index, d.UnusedCapacity, allocator.FormatSize(d.Capacity)))
			case d.CapacitySource == replay.SourceUnknown:
				if unlimited[d.Capacity] == nil {
					caps = append(caps, d.Capacity)
				}
				unlimited[d.Capacity] = append(unlimited[d.Capacity], d.Index)
			case d.CapacitySource != "" && d.CapacitySource != "option" && d.CapacitySource != "trace header" && d.Name == "":
				out = append(out, fmt.Sprintf("device %d capacity %s: %s", d.Index, allocator.FormatSize(d.Capacity), d.CapacitySource))
			}
		}
		if !(capacityShown && len(res.Devices) == 1) {
			for _, c := range caps {
				out = append(out, fmt.Sprintf("%s: the trace records no capacity and implies none; replayed on %s, which does not run out (--capacity sets one)",
					deviceList(unlimited[c]), allocator.FormatSize(c)))
			}
		}
	}
	if p := in.Profile; p != nil && p.OOMsDropped > 0 {
		out = append(out, fmt.Sprintf("%d OOMs beyond the first %d not profiled", p.OOMsDropped, len(p.OOMs)))
	}
	if p := in.Profile; p != nil && p.MarkersDropped > 0 {
		out = append(out, fmt.Sprintf("%d record_function annotations beyond the first %d not shown", p.MarkersDropped, len(p.Markers)))
	}
	out = append(out, in.Trace.Notes...)
	// The header and the reconstruction may say the same thing.
	seen := map[string]bool{}
	uniq := out[:0]
	for _, n := range out {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	return uniq
}

// withoutIdleDevices is in without the devices the replay did not use,
// for the tables (a column and a note each only widened them), and the
// note that says which were left out; in itself when none was. The first
// device stays when every one is idle.
func withoutIdleDevices(in *Input) (*Input, string) {
	res := in.Result
	if res == nil || len(res.Devices) < 2 {
		return in, ""
	}
	kept, idle := splitIdle(res)
	if len(idle) == 0 {
		return in, ""
	}
	r := *res
	r.Devices = kept
	out := *in
	out.Result = &r
	return &out, deviceList(idle) + ": no allocation and nothing reserved; left out of the table"
}

// siteNames returns the short names of the sites for narrow tables
// (profiler.ShortFrame of the site's frame when the stacks are at hand,
// else the site's label), with the stack ID added where two sites of the
// profile would read the same, listed or not, so that a name means one
// stack in every table and on the page.
func siteNames(in *Input, sites []profiler.Site) []string {
	short := func(s *profiler.Site) string {
		if in.Stacks != nil {
			if f, ok := profiler.SiteFrame(in.Stacks.Frames(s.Stack)); ok {
				return profiler.ShortFrame(f)
			}
		}
		return s.Label
	}
	all := sites
	if in.Profile != nil {
		all = in.Profile.Sites
	}
	// Each site's short name is found once (a walk of its frames): the
	// sites named are among all, by stack.
	count := make(map[string]int, len(all))
	shortOf := make(map[trace.StackID]string, len(all))
	for i := range all {
		n := short(&all[i])
		count[n]++
		shortOf[all[i].Stack] = n
	}
	names := make([]string, len(sites))
	for i := range sites {
		n, ok := shortOf[sites[i].Stack]
		if !ok {
			n = short(&sites[i])
		}
		names[i] = n
		if count[names[i]] > 1 {
			names[i] += fmt.Sprintf(" [stack %d]", sites[i].Stack)
		}
	}
	return names
}

// Formatting helpers shared by the renderers.

func size(n uint64) string { return allocator.FormatSize(n) }

func percent(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func event(i int64) string {
	if i < 0 {
		return "initial state"
	}
	return "event " + strconv.FormatInt(i, 10)
}

func sizeAt(n uint64, i int64) string {
	if n == 0 || i == unknownEvent {
		return size(n)
	}
	return size(n) + " (" + event(i) + ")"
}

func configString(res *replay.Result) string {
	if res == nil {
		return ""
	}
	return res.Config.String()
}

// policyName is the replay's allocator policy; "pytorch" for a result
// that names none.
func policyName(res *replay.Result) string {
	if res == nil || res.Policy == "" {
		return "pytorch"
	}
	return res.Policy
}

// mallocNS is the mean wall time of the replay's mallocs in the allocator,
// -1 when they were not timed.
func mallocNS(res *replay.Result) float64 {
	var n, ns int64
	if res != nil {
		for _, d := range res.Devices {
			n += d.Mallocs
			ns += d.MallocNS
		}
	}
	if n == 0 {
		return -1
	}
	return float64(ns) / float64(n)
}

func configLabel(res *replay.Result) string {
	s := configString(res)
	if s == "" {
		s = "defaults"
	}
	if res != nil && res.ConfigSource != "" {
		s += " (" + res.ConfigSource + ")"
	}
	return s
}

// duration prints a time to three significant digits in the largest unit
// under it ("21.0ms", "3.05ms", "412µs"), so that a column of them lines up
// and reads alike: time.Duration's String prints every digit it has
// ("20.9661ms" beside "3.05ms").
func duration(ns int64) string {
	d := time.Duration(ns)
	if d == 0 {
		return "0s"
	}
	if d < 0 {
		return "-" + duration(-ns)
	}
	units := []struct {
		name string
		size time.Duration
	}{{"h", time.Hour}, {"min", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"µs", time.Microsecond}}
	for i, u := range units {
		if d < u.size {
			continue
		}
		v := float64(d) / float64(u.size)
		s := sig3(v)
		if s == "1000" && i > 0 && units[i-1].size == 1000*u.size {
			// Rounding reached the next unit: 999.7ms is 1.00s.
			return "1.00" + units[i-1].name
		}
		return s + u.name
	}
	return strconv.FormatInt(ns, 10) + "ns"
}

// sig3 prints v (at least 1) to three significant digits, without an
// exponent.
func sig3(v float64) string {
	decimals := 2
	switch {
	case v >= 99.95:
		decimals = 0
	case v >= 9.995:
		decimals = 1
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// deviceNames names the real GPUs the replay ran on ("" when simulated).
func deviceNames(res *replay.Result) string {
	var names []string
	for _, d := range res.Devices {
		if d.Name != "" && !slices.Contains(names, d.Name) {
			names = append(names, d.Name)
		}
	}
	return strings.Join(names, "; ")
}

// deviceTimeLabel names the device-time figure: "measured" on a real GPU
// (wall time around the driver calls), "modelled" on the simulated one (the
// sim's cost model).
func deviceTimeLabel(measured bool) string {
	if measured {
		return "measured device time"
	}
	return "modelled device time"
}

// timeSource is deviceTimeLabel's word alone, for JSON.
func timeSource(measured bool) string {
	if measured {
		return "measured"
	}
	return "modelled"
}

func deviceCalls(f *profiler.Figures) string {
	return fmt.Sprintf("cudaMalloc %d, cudaFree %d, cuMemMap %d, cuMemUnmap %d",
		f.DeviceMallocs, f.DeviceFrees, f.DeviceMaps, f.DeviceUnmaps)
}

func traceLabel(h trace.Header) string {
	var parts []string
	if h.SourceFile != "" {
		parts = append(parts, h.SourceFile)
	}
	if h.Source != "" {
		parts = append(parts, "("+h.Source+")")
	}
	return strings.Join(parts, " ")
}

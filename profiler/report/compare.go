package report

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
)

// CompareRow is one configuration of a comparison: the same trace replayed
// under Label's settings.
type CompareRow struct {
	// Label names the configuration, e.g. the --alloc-conf string or
	// "recorded settings".
	Label   string
	Result  *replay.Result
	Profile *profiler.Profile
}

// WriteCompareTable writes the configurations side by side, one column
// each: what each costs in reserved memory, fragmentation, retries, OOMs
// and device calls.
func WriteCompareTable(w io.Writer, rows []CompareRow) error {
	s := section{header: []string{"figure"}, right: []bool{false}}
	fs := make([]profiler.Figures, len(rows))
	for i, r := range rows {
		s.header = append(s.header, r.Label)
		s.right = append(s.right, true)
		fs[i] = figures(r.Result, r.Profile)
	}
	add := func(name string, v func(i int) string) {
		row := []string{name}
		for i := range rows {
			row = append(row, v(i))
		}
		s.rows = append(s.rows, row)
	}
	add("config", func(i int) string {
		if c := configString(rows[i].Result); c != "" {
			return c
		}
		return "defaults"
	})
	add("policy", func(i int) string { return policyName(rows[i].Result) })
	add("events replayed", func(i int) string {
		r := rows[i].Result
		if r == nil {
			return "-"
		}
		v := strconv.FormatInt(r.Events, 10)
		if r.Stopped {
			v += " (stopped)"
		}
		return v
	})
	add("peak live", func(i int) string { return size(fs[i].PeakLiveBytes) })
	add("peak reserved", func(i int) string { return size(fs[i].PeakReservedBytes) })
	add("waste (1 - live/reserved)", func(i int) string { return percent(fs[i].WasteRatio) })
	add("largest free block at peak", func(i int) string { return size(fs[i].LargestFreeBlockBytesAtPeak) })
	add("stranded at peak", func(i int) string { return size(fs[i].StrandedBytesAtPeak) })
	add("external fragmentation at peak", func(i int) string { return percent(fs[i].ExternalFragmentationAtPeak) })
	add("alloc retries", func(i int) string { return strconv.FormatInt(fs[i].AllocRetries, 10) })
	add("OOMs", func(i int) string { return strconv.FormatInt(fs[i].OOMs, 10) })
	add("first OOM", func(i int) string {
		if e := firstOOM(rows[i].Result); e >= 0 {
			return event(e)
		}
		return "-"
	})
	add("malloc (mean wall time)", func(i int) string {
		if ns := mallocNS(rows[i].Result); ns >= 0 {
			return strconv.FormatFloat(ns, 'f', 0, 64) + " ns"
		}
		return "-"
	})
	add("cudaMalloc", func(i int) string { return strconv.FormatUint(fs[i].DeviceMallocs, 10) })
	add("cudaFree", func(i int) string { return strconv.FormatUint(fs[i].DeviceFrees, 10) })
	add("cuMemMap", func(i int) string { return strconv.FormatUint(fs[i].DeviceMaps, 10) })
	add("cuMemUnmap", func(i int) string { return strconv.FormatUint(fs[i].DeviceUnmaps, 10) })
	// All columns come from one kind of device in memreplay compare; should
	// they not, each value says which kind it is.
	measured, mixed := false, false
	for i := range fs {
		mixed = mixed || (i > 0 && fs[i].DeviceTimeMeasured != measured)
		measured = fs[i].DeviceTimeMeasured
	}
	if mixed {
		add("device time", func(i int) string {
			return duration(fs[i].DeviceTimeNS) + " (" + timeSource(fs[i].DeviceTimeMeasured) + ")"
		})
	} else {
		add(deviceTimeLabel(measured), func(i int) string { return duration(fs[i].DeviceTimeNS) })
	}
	return renderTable(w, &s, false)
}

type jsonCompareRow struct {
	Label  string `json:"label"`
	Config string `json:"config"`
	Policy string `json:"policy"`
	// MallocNS is the mean wall time of a malloc in the allocator, null
	// when not timed.
	MallocNS      *float64          `json:"malloc_ns"`
	Events        int64             `json:"events"`
	Stopped       bool              `json:"stopped"`
	Fragmentation jsonFragmentation `json:"fragmentation"`
	DeviceCalls   jsonCalls         `json:"device_calls"`
	// FirstOOMEvent is the event of the first OOM, null without one.
	FirstOOMEvent *int64           `json:"first_oom_event"`
	Stats         map[string]int64 `json:"stats"`
}

// WriteCompareJSON writes the comparison as a JSON array, one object per
// configuration in the order given, with the keys of WriteJSON's
// "fragmentation", "device_calls" and "stats".
func WriteCompareJSON(w io.Writer, rows []CompareRow) error {
	out := make([]jsonCompareRow, 0, len(rows))
	for _, r := range rows {
		f := figures(r.Result, r.Profile)
		jr := jsonCompareRow{Label: r.Label, Config: configString(r.Result), Policy: policyName(r.Result),
			Fragmentation: fragmentationJSON(&f), Stats: summedStats(r.Result),
			DeviceCalls: callsSummary(&f)}
		if r.Result != nil {
			jr.Events, jr.Stopped = r.Result.Events, r.Result.Stopped
		}
		if e := firstOOM(r.Result); e >= 0 {
			jr.FirstOOMEvent = &e
		}
		if ns := mallocNS(r.Result); ns >= 0 {
			jr.MallocNS = &ns
		}
		out = append(out, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

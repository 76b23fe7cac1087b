package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
// and device calls. A trace of several devices gets each device's figures
// first, with its capacity; only the peaks summed over the devices at one
// moment and the counts are given for all devices together, labelled so.
// Notes on what every column shares (a partial trace's initial state)
// follow the table.
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
	devs, _ := compareDevices(rows)
	all := ""
	if len(devs) > 1 {
		all = " (all devices)"
		for _, d := range devs {
			p := fmt.Sprintf("device %d: ", d)
			// dev returns the device's figures in column i, nil when the
			// column has no such device.
			dev := func(i int) (*profiler.Figures, *replay.DeviceResult) { return deviceFigures(&rows[i], d) }
			per := func(name string, v func(f *profiler.Figures, r *replay.DeviceResult) string) {
				add(p+name, func(i int) string {
					f, r := dev(i)
					if r == nil {
						return "-"
					}
					return v(f, r)
				})
			}
			per("capacity", func(_ *profiler.Figures, r *replay.DeviceResult) string { return compareCapacity(r) })
			per("peak live", func(f *profiler.Figures, _ *replay.DeviceResult) string { return size(f.PeakLiveBytes) })
			per("peak reserved", func(f *profiler.Figures, _ *replay.DeviceResult) string { return size(f.PeakReservedBytes) })
			per("waste (1 - live/reserved)", func(f *profiler.Figures, _ *replay.DeviceResult) string { return percent(f.WasteRatio) })
			per("largest free block at peak", func(f *profiler.Figures, _ *replay.DeviceResult) string {
				return size(f.LargestFreeBlockBytesAtPeak)
			})
			per("stranded at peak", func(f *profiler.Figures, _ *replay.DeviceResult) string { return size(f.StrandedBytesAtPeak) })
			per("external fragmentation at peak", func(f *profiler.Figures, _ *replay.DeviceResult) string {
				return percent(f.ExternalFragmentationAtPeak)
			})
			per("OOMs", func(f *profiler.Figures, _ *replay.DeviceResult) string { return strconv.FormatInt(f.OOMs, 10) })
		}
		// The profiler's total peaks are of the sum at one event, which
		// the job's devices held together; without a profile only the
		// devices' own peaks are known, which may fall at different events.
		summed := func(v func(f *profiler.Figures) uint64) func(i int) string {
			return func(i int) string {
				if rows[i].Profile == nil {
					return "-"
				}
				return size(v(&fs[i]))
			}
		}
		n := len(devs)
		add(fmt.Sprintf("peak live, %d devices summed at one moment", n), summed(func(f *profiler.Figures) uint64 { return f.PeakLiveBytes }))
		add(fmt.Sprintf("peak reserved, %d devices summed at one moment", n), summed(func(f *profiler.Figures) uint64 { return f.PeakReservedBytes }))
	} else {
		add("peak live", func(i int) string { return size(fs[i].PeakLiveBytes) })
		add("peak reserved", func(i int) string { return size(fs[i].PeakReservedBytes) })
		add("waste (1 - live/reserved)", func(i int) string { return percent(fs[i].WasteRatio) })
		add("largest free block at peak", func(i int) string { return size(fs[i].LargestFreeBlockBytesAtPeak) })
		add("stranded at peak", func(i int) string { return size(fs[i].StrandedBytesAtPeak) })
		add("external fragmentation at peak", func(i int) string { return percent(fs[i].ExternalFragmentationAtPeak) })
	}
	add("alloc retries"+all, func(i int) string { return strconv.FormatInt(fs[i].AllocRetries, 10) })
	add("OOMs"+all, func(i int) string { return strconv.FormatInt(fs[i].OOMs, 10) })
	add("first OOM", func(i int) string {
		r := rows[i].Result
		if e := firstOOM(r); e >= 0 {
			if len(devs) > 1 {
				return fmt.Sprintf("%s (device %d)", event(e), r.OOMs[0].Device)
			}
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
	add("cudaMalloc"+all, func(i int) string { return strconv.FormatUint(fs[i].DeviceMallocs, 10) })
	add("cudaFree"+all, func(i int) string { return strconv.FormatUint(fs[i].DeviceFrees, 10) })
	add("cuMemMap"+all, func(i int) string { return strconv.FormatUint(fs[i].DeviceMaps, 10) })
	add("cuMemUnmap"+all, func(i int) string { return strconv.FormatUint(fs[i].DeviceUnmaps, 10) })
	// All columns come from one kind of device in memreplay compare; should
	// they not, each value says which kind it is.
	measured, mixed := false, false
	for i := range fs {
		mixed = mixed || (i > 0 && fs[i].DeviceTimeMeasured != measured)
		measured = fs[i].DeviceTimeMeasured
	}
	if mixed {
		add("device time"+all, func(i int) string {
			return duration(fs[i].DeviceTimeNS) + " (" + timeSource(fs[i].DeviceTimeMeasured) + ")"
		})
	} else {
		add(deviceTimeLabel(measured)+all, func(i int) string { return duration(fs[i].DeviceTimeNS) })
	}
	if err := renderTable(w, &s, false); err != nil {
		return err
	}
	for _, n := range compareNotes(rows, fs) {
		if _, err := fmt.Fprintln(w, "  "+n); err != nil {
			return err
		}
	}
	return nil
}

// compareDevices lists, in order, the device indices the rows share out
// one by one: those that hold something in some row (all of a row's when
// it holds nothing anywhere, as splitIdle keeps one). idle lists the
// others: they hold nothing in any row.
func compareDevices(rows []CompareRow) (shown, idle []int32) {
	kept, all := map[int32]bool{}, map[int32]bool{}
	for _, r := range rows {
		if r.Result == nil {
			continue
		}
		k, _ := splitIdle(r.Result)
		for _, d := range k {
			kept[d.Index] = true
		}
		for _, d := range r.Result.Devices {
			all[d.Index] = true
		}
	}
	for i := range all {
		if kept[i] {
			shown = append(shown, i)
		} else {
			idle = append(idle, i)
		}
	}
	slices.Sort(shown)
	slices.Sort(idle)
	return shown, idle
}

// deviceFigures returns one device's figures in a row: the profiler's, or
// the allocator's statistics without a profile; nil when the row has no
// such device.
func deviceFigures(r *CompareRow, index int32) (*profiler.Figures, *replay.DeviceResult) {
	if r.Result == nil {
		return nil, nil
	}
	ds := r.Result.Devices
	// The replay lists its devices by index: a search, not a walk, for
	// traces that name thousands; a walk should they not be in order.
	i, ok := slices.BinarySearchFunc(ds, index, func(d replay.DeviceResult, x int32) int { return cmp.Compare(d.Index, x) })
	if !ok {
		i = slices.IndexFunc(ds, func(d replay.DeviceResult) bool { return d.Index == index })
		if i < 0 {
			return nil, nil
		}
	}
	d := &ds[i]
	if dp := deviceProfile(r.Profile, index); dp != nil {
		return &dp.Figures, d
	}
	f := figures(&replay.Result{Devices: ds[i : i+1]}, nil)
	return &f, d
}

// compareCapacity is a device's capacity for a narrow column: its size
// and source, "not limited" when the trace gives none (a note says so).
func compareCapacity(d *replay.DeviceResult) string {
	switch d.CapacitySource {
	case "unknown":
		return "not limited"
	case "":
		return size(d.Capacity)
	}
	return size(d.Capacity) + " (" + d.CapacitySource + ")"
}

// compareNotes are what the columns share and a reader must know to read
// them: the state a partial trace starts from, which no setting moves, and
// why a device is "not limited". The same sentences go into each row of
// the JSON.
func compareNotes(rows []CompareRow, fs []profiler.Figures) []string {
	var out []string
	addNote := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	newSegments := false
	for i := range fs {
		newSegments = newSegments || fs[i].DeviceMallocs > 0 || fs[i].DeviceMaps > 0
	}
	anyPlaced := false
	for _, r := range rows {
		anyPlaced = anyPlaced || r.Result != nil && r.Result.Reconstructed != nil && r.Result.Reconstructed.Placed
	}
	for _, r := range rows {
		if r.Result == nil {
			continue
		}
		if rc := r.Result.Reconstructed; rc != nil && rc.Placed {
			addNote(fmt.Sprintf("%s: the %d blocks live before the first event (%s) were placed by the %s policy as one batch, "+
				"largest first, not in their recorded segments", r.Label, rc.LiveBlocks, size(rc.LiveBytes), policyName(r.Result)))
			continue
		}
		if n := pinnedNote(r.Result, anyPlaced); n != "" {
			addNote(n)
			if !newSegments {
				addNote("no column created a segment (cudaMalloc and cuMemMap 0): every later allocation fit in the recorded " +
					"segments, so settings that decide how segments are made, such as expandable_segments, had nothing to change")
			}
		}
	}
	devs, idle := compareDevices(rows)
	if len(idle) > 0 {
		addNote(deviceList(idle) + ": no allocation and nothing reserved in any column; left out of the device figures")
	}
	// Only the table of several devices has capacity rows to explain.
	if len(devs) > 1 {
		var unlimited []int32
		var on uint64
		for _, d := range devs {
			for i := range rows {
				if _, dr := deviceFigures(&rows[i], d); dr != nil && dr.CapacitySource == "unknown" {
					unlimited, on = append(unlimited, d), dr.Capacity
					break
				}
			}
		}
		if len(unlimited) > 0 {
			which := deviceList(unlimited)
			addNote(fmt.Sprintf("not limited: the trace records no capacity for %s and implies none; replayed on %s, "+
				"which does not run out (--capacity sets one)", which, size(on)))
		}
	}
	return out
}

// pinnedNote says, for a partial trace (recording started after the
// program had allocated), that every replay starts from the state the
// recording found, whatever its settings: the blocks alive then stay in
// the segments they were recorded in until the trace frees them.
//
// When another policy placed those blocks itself in some column, the note
// speaks of the PyTorch-policy columns only.
func pinnedNote(res *replay.Result, othersPlaced bool) string {
	rc := res.Reconstructed
	if rc == nil || rc.Segments == 0 || rc.Placed {
		return ""
	}
	columns := "every column starts"
	if othersPlaced {
		columns = "every pytorch-policy column starts"
	}
	return fmt.Sprintf("partial trace: the recording started with %d segments (%s) holding %d live blocks (%s); "+
		columns+" from them as recorded, the blocks alive at the start pinned in their recorded segments, "+
		"so a setting changes only the segments made after the first event",
		rc.Segments, size(rc.SegmentBytes), rc.LiveBlocks, size(rc.LiveBytes))
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
	// Devices are each device's own figures, with its capacity.
	Devices []jsonCompareDevice `json:"devices"`
	// EmptyDevices counts and names the row's devices that hold nothing,
	// not listed in Devices.
	EmptyDevices jsonEmptyDevices `json:"empty_devices"`
	// Reconstructed is the state a partial trace starts from (null for a
	// trace recorded from the start); InitialBlocksPinned says its live
	// blocks stay in their recorded segments under every setting.
	Reconstructed       *jsonReconstruction `json:"reconstructed"`
	InitialBlocksPinned bool                `json:"initial_blocks_pinned"`
	Notes               []string            `json:"notes"`
}

type jsonCompareDevice struct {
	Index          int32             `json:"index"`
	Capacity       uint64            `json:"capacity"`
	CapacitySource string            `json:"capacity_source"`
	Fragmentation  jsonFragmentation `json:"fragmentation"`
	DeviceCalls    jsonCalls         `json:"device_calls"`
}

// WriteCompareJSON writes the comparison as a JSON array, one object per
// configuration in the order given, with the keys of WriteJSON's
// "fragmentation", "device_calls" and "stats" (over all devices: the
// peaks of the sum at one moment, the statistics summed), "devices" (each
// device that holds something: its "index", "capacity",
// "capacity_source", "fragmentation" and "device_calls"),
// "empty_devices" (the others' "count" and "ranges", "1, 3-60001"), "reconstructed" and "initial_blocks_pinned" (a partial
// trace's starting state, which no setting moves) and "notes" (the
// sentences the table prints under it).
func WriteCompareJSON(w io.Writer, rows []CompareRow) error {
	out := make([]jsonCompareRow, 0, len(rows))
	fs := make([]profiler.Figures, len(rows))
	for i, r := range rows {
		fs[i] = figures(r.Result, r.Profile)
	}
	notes := compareNotes(rows, fs)
	if notes == nil {
		notes = []string{}
	}
	for i, r := range rows {
		f := &fs[i]
		jr := jsonCompareRow{Label: r.Label, Config: configString(r.Result), Policy: policyName(r.Result),
			Fragmentation: fragmentationJSON(f), Stats: summedStats(r.Result),
			DeviceCalls: callsSummary(f), Devices: []jsonCompareDevice{}, Notes: notes}
		if r.Result != nil {
			jr.Events, jr.Stopped = r.Result.Events, r.Result.Stopped
			kept, idle := splitIdle(r.Result)
			jr.EmptyDevices = emptyDevicesJSON(idle)
			for _, d := range kept {
				df, dr := deviceFigures(&rows[i], d.Index)
				jr.Devices = append(jr.Devices, jsonCompareDevice{Index: d.Index, Capacity: dr.Capacity,
					CapacitySource: dr.CapacitySource, Fragmentation: fragmentationJSON(df), DeviceCalls: callsSummary(df)})
			}
			if rc := r.Result.Reconstructed; rc != nil {
				jr.Reconstructed = reconstructionJSON(rc)
				jr.InitialBlocksPinned = rc.Segments > 0 && !rc.Placed
			}
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

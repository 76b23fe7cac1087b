package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// recordThreeDevices records one job on three GPUs, each with its own
// allocator and its own load: device 0's capacity is not in the trace
// (header 0), devices 1 and 2 have 1 GiB and 512 MiB, and device 2 runs
// out of memory (OOMs skipped, as a training loop that catches them
// would). Each device peaks at its own event, so the sum of the devices'
// peaks is more than the peak of their sum.
func recordThreeDevices(t *testing.T) *trace.Trace {
	t.Helper()
	cfg := config.Default()
	caps := []uint64{2 << 30, 1 << 30, 512 * MiB}
	st := trace.NewStacks()
	site := st.Intern([]trace.Frame{{Name: "forward", Filename: "/src/model.py", Line: 20}})
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "three-gpus.mrt", AllocatorSettings: cfg.AllocatorSettings()},
		Stacks: st}
	var allocs []*allocator.Allocator
	for d, c := range caps {
		a := newAllocator(t, c, cfg, allocator.WithDeviceIndex(d))
		replay.Record(a, int32(d), func(e *trace.Event) { tr.Events = append(tr.Events, *e) }).SetStack(site)
		allocs = append(allocs, a)
		hc := c
		if d == 0 {
			hc = 0
		}
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: int32(d), Capacity: hc})
	}
	var live [3][]*allocator.Block
	for i := 0; i < 900; i++ {
		d := i % 3
		// Device d keeps up to 12*(d+1) blocks, and its load swells at its
		// own phase, so the devices peak at different events.
		keep := 12 * (d + 1)
		if (i/90+d)%3 == 0 {
			keep /= 3
		}
		for len(live[d]) > keep {
			require.NoError(t, allocs[d].Free(live[d][0]))
			live[d] = live[d][1:]
		}
		b, err := allocs[d].Malloc(uint64(9+(i*7)%13)*MiB, 0)
		if errors.Is(err, allocator.ErrOutOfMemory) {
			continue
		}
		require.NoError(t, err)
		live[d] = append(live[d], b)
	}
	return tr
}

// TestCompareMultiDevice: compare on a trace of several GPUs shows each
// device's figures with its own capacity, and sums only under a label
// that says what they sum.
func TestCompareMultiDevice(t *testing.T) {
	tr := recordThreeDevices(t)
	rows := []report.CompareRow{}
	for _, c := range []*config.Config{nil, expandable(t)} {
		in := replayed(t, tr, c, false)
		rows = append(rows, report.CompareRow{Label: fmt.Sprint(len(rows)), Result: in.Result, Profile: in.Profile})
	}
	p := rows[0].Profile
	require.Len(t, p.Devices, 3)
	require.Positive(t, p.Total.OOMs, "device 2 runs out")
	var sumOfPeaks uint64
	for _, d := range p.Devices {
		sumOfPeaks += d.PeakLiveBytes
	}
	require.Greater(t, sumOfPeaks, p.Total.PeakLiveBytes, "the devices peak at different events")

	var tab bytes.Buffer
	require.NoError(t, report.WriteCompareTable(&tab, rows))
	out := tab.String()
	t.Log("\n" + out)
	for i, d := range p.Devices {
		res := rows[0].Result.Devices[i]
		assert.Regexp(t, fmt.Sprintf(`\| device %d: peak live +\| +%s \|`, d.Index, regexp.QuoteMeta(allocator.FormatSize(d.PeakLiveBytes))), out)
		want := allocator.FormatSize(res.Capacity) + " (" + res.CapacitySource + ")"
		if res.CapacitySource == "unknown" {
			want = "not limited"
		}
		assert.Regexp(t, fmt.Sprintf(`\| device %d: capacity +\| +%s \|`, d.Index, regexp.QuoteMeta(want)), out)
	}
	assert.Regexp(t, `\| peak live, 3 devices summed at one moment +\| +`+regexp.QuoteMeta(allocator.FormatSize(p.Total.PeakLiveBytes))+` \|`, out)
	assert.NotRegexp(t, `(?m)^\| peak live +\|`, out, "no unlabelled sum")
	assert.Regexp(t, `\| OOMs \(all devices\) +\| +\d+ \|`, out)
	assert.Contains(t, out, "not limited: the trace records no capacity for device 0")

	var js bytes.Buffer
	require.NoError(t, report.WriteCompareJSON(&js, rows))
	var got []struct {
		Devices []struct {
			Index         int32  `json:"index"`
			Capacity      uint64 `json:"capacity"`
			Fragmentation struct {
				PeakLive uint64 `json:"peak_live_bytes"`
			} `json:"fragmentation"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	require.Len(t, got, 2)
	require.Len(t, got[0].Devices, 3)
	for i, d := range got[0].Devices {
		assert.Equal(t, rows[0].Result.Devices[i].Capacity, d.Capacity)
		assert.Equal(t, p.Devices[i].PeakLiveBytes, d.Fragmentation.PeakLive)
	}
}

// partialTrace is the training-like trace as a recording that started
// after the weights were loaded: the events from the fourth allocation on,
// the state before them rebuilt from the events and the final segments,
// as for a real snapshot (replay.Prepare).
func partialTrace(t *testing.T) *trace.Trace {
	t.Helper()
	full := recordTrainingLike(t)
	allocs := 0
	for i, e := range full.Events {
		if e.Action == trace.ActionAlloc {
			if allocs++; allocs == 4 {
				tr := *full
				tr.Events = full.Events[i:]
				_, err := replay.Prepare(&tr)
				require.NoError(t, err)
				require.True(t, tr.InitialReconstructed)
				return &tr
			}
		}
	}
	t.Fatal("no fourth allocation")
	return nil
}

// TestComparePartialTrace: on a trace whose recording started late,
// compare says that every column starts from the recorded state with its
// live blocks pinned in their segments, in the table and in the JSON.
func TestComparePartialTrace(t *testing.T) {
	tr := partialTrace(t)
	var rows []report.CompareRow
	for _, c := range []*config.Config{nil, expandable(t)} {
		in := replayed(t, tr, c, false)
		require.NotNil(t, in.Result.Reconstructed)
		rows = append(rows, report.CompareRow{Label: fmt.Sprint(len(rows)), Result: in.Result, Profile: in.Profile})
	}
	rc := rows[0].Result.Reconstructed
	require.Positive(t, rc.LiveBlocks)
	var tab bytes.Buffer
	require.NoError(t, report.WriteCompareTable(&tab, rows))
	t.Log("\n" + tab.String())
	want := fmt.Sprintf("partial trace: the recording started with %d segments (%s) holding %d live blocks (%s); "+
		"every column starts from them as recorded, the blocks alive at the start pinned in their recorded segments",
		rc.Segments, allocator.FormatSize(rc.SegmentBytes), rc.LiveBlocks, allocator.FormatSize(rc.LiveBytes))
	assert.Contains(t, tab.String(), want)

	var js bytes.Buffer
	require.NoError(t, report.WriteCompareJSON(&js, rows))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	for _, r := range got {
		assert.Equal(t, true, r["initial_blocks_pinned"])
		assert.Equal(t, float64(rc.LiveBlocks), r["reconstructed"].(map[string]any)["live_blocks"])
		assert.True(t, strings.HasPrefix(r["notes"].([]any)[0].(string), want))
	}

	// A trace recorded from the start has nothing pinned.
	full := replayed(t, recordTrainingLike(t), nil, false)
	js.Reset()
	require.NoError(t, report.WriteCompareJSON(&js, []report.CompareRow{{Label: "a", Result: full.Result, Profile: full.Profile}}))
	got = nil
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	assert.Equal(t, false, got[0]["initial_blocks_pinned"])
	assert.Nil(t, got[0]["reconstructed"])
}

// TestHTMLMultiDevice: the page carries each device's own timeline
// columns, which add up to the summed ones, and each device's peak map
// before the map at the peak of their sum.
func TestHTMLMultiDevice(t *testing.T) {
	in := replayed(t, recordThreeDevices(t), nil, false)
	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}))
	assert.Equal(t, true, d["multi_device"])
	run := d["runs"].([]any)[0].(map[string]any)
	tl := run["timeline"].(map[string]any)
	devs := tl["devices"].([]any)
	require.Len(t, devs, 3)
	live := tl["live"].([]any)
	for i := range live {
		var sum float64
		for k, dv := range devs {
			dm := dv.(map[string]any)
			assert.Equal(t, float64(k), dm["index"])
			sum += dm["live"].([]any)[i].(float64)
		}
		require.Equal(t, live[i], sum, "sample %d", i)
	}
	var titles []string
	for _, c := range run["captures"].([]any) {
		titles = append(titles, c.(map[string]any)["title"].(string))
	}
	p := in.Profile
	require.GreaterOrEqual(t, len(titles), 4)
	for k, dp := range p.Devices {
		assert.Equal(t, fmt.Sprintf("device %d: peak live (event %d)", dp.Index, dp.Peak.Event), titles[k])
	}
	assert.Equal(t, fmt.Sprintf("all 3 devices: peak of their summed live bytes (event %d)", p.Peak.Event), titles[3])
}

// TestBrowserMultiDevice: a run on three GPUs is told device by device,
// each against its own capacity, and the sums say they are sums: the
// verdict, the figures, and a timeline per device with its OOMs and its
// capacity, before the summed one.
func TestBrowserMultiDevice(t *testing.T) {
	in := replayed(t, recordThreeDevices(t), nil, false)
	sc, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}, "multi-device", "")
	text := pageText(dom)
	p, res := in.Profile, in.Result
	assert.NotContains(t, text, "the program needed at most", "no headline of the sum as if one GPU")
	hasText(t, text, fmt.Sprintf("recorded, 3 devices: device 0 (capacity not limited) needed at most %s live",
		allocator.FormatSize(p.Devices[0].PeakLiveBytes)))
	hasText(t, text, fmt.Sprintf("device 2 (512.00 MiB) needed at most %s live, the allocator reserved up to %s, %d OOMs",
		allocator.FormatSize(p.Devices[2].PeakLiveBytes), allocator.FormatSize(p.Devices[2].PeakReservedBytes), p.Devices[2].OOMs))
	hasText(t, text, "Summed over the devices at one moment: at most "+allocator.FormatSize(p.Total.PeakLiveBytes)+" live")

	hasText(t, dom, `data-figure="device 0: capacity">not limited<`)
	hasText(t, dom, `data-figure="device 1: capacity">1024.00 MiB (trace header)<`)
	hasText(t, dom, `data-figure="device 2: peak live">`+allocator.FormatSize(p.Devices[2].PeakLiveBytes))
	hasText(t, dom, `data-figure="peak live, 3 devices summed at one moment">`+allocator.FormatSize(p.Total.PeakLiveBytes))
	assert.False(t, strings.Contains(dom, `data-figure="peak live">`), "no unlabelled sum")
	assert.False(t, strings.Contains(dom, `data-figure="capacity">`), "no capacity of the first device for all")

	figs, err := report.ExtractFigures(dom)
	require.NoError(t, err)
	for k := range p.Devices {
		c := sc.Chart(fmt.Sprintf("timeline-0-device%d", k))
		require.NotNil(t, c, "device %d's timeline", k)
		marks := 0
		for _, o := range res.OOMs {
			if o.Device == int32(k) {
				marks++
			}
		}
		for _, r := range p.Retries {
			if r.Device == int32(k) {
				marks++
			}
		}
		assert.Equal(t, marks, c.Markers, "device %d: its own OOMs and retries", k)
	}
	assert.Positive(t, sc.Chart("timeline-0-device2").Markers)
	assert.Zero(t, sc.Chart("timeline-0-device0").Markers)
	hasText(t, string(figs["timeline-0-device2"]), "capacity 512.00 MiB")
	assert.NotNil(t, sc.Chart("timeline-0"), "the sum, after the devices")
	hasText(t, text, "all 3 devices summed")
}

// hasText is assert.Contains without the haystack in the message: a page
// is megabytes.
func hasText(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("the output does not say %q", sub)
	}
}

// TestPprofMultiDevice: the pprof header of a trace of several GPUs says
// each device's peak, and the total it states is the profile's
// inuse_space total (each device's samples are at its own peak), told
// apart from the peak of the devices' sum.
func TestPprofMultiDevice(t *testing.T) {
	in := replayed(t, recordThreeDevices(t), nil, false)
	var buf bytes.Buffer
	require.NoError(t, report.WritePprof(&buf, in))
	pp, err := profile.Parse(&buf)
	require.NoError(t, err)
	var inuse int64
	perDevice := map[string]int64{}
	for _, s := range pp.Sample {
		inuse += s.Value[0]
		if d := s.Label["device"]; len(d) > 0 {
			perDevice[d[0]] += s.Value[0]
		}
	}
	header := strings.Join(pp.Comments, "\n")
	t.Log("\n" + header)
	p := in.Profile
	for _, d := range p.Devices {
		assert.Equal(t, int64(d.PeakLiveBytes), perDevice[fmt.Sprint(d.Index)], "device %d", d.Index)
		hasText(t, header, fmt.Sprintf("device %d: peak live %s at event %d, peak reserved %s", d.Index,
			allocator.FormatSize(d.PeakLiveBytes), d.PeakLiveEvent, allocator.FormatSize(d.PeakReservedBytes)))
	}
	hasText(t, header, "inuse_space total "+allocator.FormatSize(uint64(inuse))+": the sum of the 3 devices' own peaks")
	hasText(t, header, "the 3 devices summed at one moment: peak live "+allocator.FormatSize(p.Total.PeakLiveBytes))
	assert.NotRegexp(t, `(?m)^peak live`, header, "no unlabelled sum")
}

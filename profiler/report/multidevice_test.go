package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/gpu"
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
		card, err := gpu.New(gpu.Options{Capacity: c, NoContextOverhead: true})
		require.NoError(t, err)
		proc, err := card.NewProcess()
		require.NoError(t, err)
		a, err := allocator.New(proc, cfg, allocator.WithDeviceIndex(d))
		require.NoError(t, err)
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

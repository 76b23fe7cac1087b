package report_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// namedDevices is a trace whose header names n devices and whose few
// allocations are all on device 0 (issue 16's 60,000-device header).
func namedDevices(n int) *trace.Trace {
	h := trace.Header{Source: "memreplay", SourceFile: "devices.mrt"}
	for i := range n {
		h.Devices = append(h.Devices, trace.Device{Index: int32(i)})
	}
	tr := &trace.Trace{Header: h, Stacks: trace.NewStacks()}
	for i := range uint64(5) {
		tr.Events = append(tr.Events, trace.Event{Action: trace.ActionAlloc, Addr: 0x1000 + i<<20, Size: 512})
	}
	return tr
}

type emptyDevicesJSON struct {
	Devices []struct {
		Index int32 `json:"index"`
	} `json:"devices"`
	EmptyDevices struct {
		Count  int    `json:"count"`
		Ranges string `json:"ranges"`
	} `json:"empty_devices"`
	Notes []string         `json:"notes"`
	Stats map[string]int64 `json:"stats"`
}

// The reports of a trace naming 10,000 devices, one of which holds
// something, list that one and count the others: each device used to be
// written with its full statistics (about 6 KB: 364 MB and 2-3 GB of the
// encoder's memory for 60,000), so the output grew with the devices named
// instead of with what the trace holds.
func TestEmptyDevicesSummarised(t *testing.T) {
	const n = 10000
	tr := namedDevices(n)
	in := replayed(t, tr, nil, false)
	require.Len(t, in.Result.Devices, n)

	var b bytes.Buffer
	require.NoError(t, report.WriteJSON(&b, in))
	// One device's report is a few KB (its statistics, the timeline);
	// 64 KB is far below what 10,000 listed devices take.
	require.Less(t, b.Len(), 64<<10, "JSON bytes for one device in use among %d", n)
	var v emptyDevicesJSON
	require.NoError(t, json.Unmarshal(b.Bytes(), &v))
	require.Len(t, v.Devices, 1)
	require.EqualValues(t, 0, v.Devices[0].Index)
	require.Equal(t, n-1, v.EmptyDevices.Count)
	require.Equal(t, "1-9999", v.EmptyDevices.Ranges)
	// The statistics are still summed over every device.
	require.EqualValues(t, 5*512, v.Stats["allocated_bytes.all.current"])
	require.EqualValues(t, 5, v.Stats["allocation.all.allocated"])
	require.Contains(t, v.Notes, "devices 1-9999: no allocation and nothing reserved; left out of the device figures")

	// compare: the JSON rows and the table likewise.
	rows := []report.CompareRow{{Label: "a", Result: in.Result, Profile: in.Profile}, {Label: "b", Result: in.Result, Profile: in.Profile}}
	b.Reset()
	require.NoError(t, report.WriteCompareJSON(&b, rows))
	require.Less(t, b.Len(), 32<<10, "compare JSON bytes")
	var cv []emptyDevicesJSON
	require.NoError(t, json.Unmarshal(b.Bytes(), &cv))
	require.Len(t, cv, 2)
	for _, r := range cv {
		require.Len(t, r.Devices, 1)
		require.Equal(t, n-1, r.EmptyDevices.Count)
		require.Equal(t, "1-9999", r.EmptyDevices.Ranges)
	}
	b.Reset()
	require.NoError(t, report.WriteCompareTable(&b, rows))
	require.Less(t, b.Len(), 8<<10, "compare table bytes")
	require.Contains(t, b.String(), "devices 1-9999: no allocation and nothing reserved in any column; left out of the device figures")
	require.NotContains(t, b.String(), "device 1:")

	// The page carries the JSON report.
	b.Reset()
	require.NoError(t, report.WriteHTML(&b, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "a", Input: in}}}))
	require.Less(t, b.Len(), 2<<20, "HTML bytes")
	require.Contains(t, b.String(), `"empty_devices":{"count":9999,"ranges":"1-9999"}`)
}

// A device empty in one column and in use in another is listed in both
// columns of compare: only devices that hold nothing anywhere are left out.
func TestCompareKeepsDeviceUsedInOneColumn(t *testing.T) {
	two := namedDevices(3)
	two.Events = append(two.Events, trace.Event{Action: trace.ActionAlloc, Addr: 0x9000000, Size: 512, Device: 2})
	a := replayed(t, namedDevices(3), nil, false)
	b2 := replayed(t, two, nil, false)
	rows := []report.CompareRow{{Label: "a", Result: a.Result, Profile: a.Profile}, {Label: "b", Result: b2.Result, Profile: b2.Profile}}
	var b bytes.Buffer
	require.NoError(t, report.WriteCompareTable(&b, rows))
	out := b.String()
	require.Contains(t, out, "device 2: peak live")
	require.NotContains(t, out, "device 1: peak live")
	require.Contains(t, out, "device 1: no allocation and nothing reserved in any column")
}

// A replay without the profiler reports the same summary.
func TestEmptyDevicesWithoutProfile(t *testing.T) {
	tr := namedDevices(4)
	res, err := replay.Run(tr.NewReader(), replay.Options{Name: "devices.mrt"})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, report.WriteJSON(&b, &report.Input{Trace: tr.Header, Result: res}))
	var v emptyDevicesJSON
	require.NoError(t, json.Unmarshal(b.Bytes(), &v))
	require.Len(t, v.Devices, 1)
	require.Equal(t, "1-3", v.EmptyDevices.Ranges)
}

// The reports of a trace naming 60,000 devices, one in use: go test
// ./profiler/report -run '^$' -bench NamedDevices.
func BenchmarkReportNamedDevices(b *testing.B) {
	tr := namedDevices(60000)
	in := replayed(b, tr, nil, false)
	rows := []report.CompareRow{{Label: "a", Result: in.Result, Profile: in.Profile}}
	for b.Loop() {
		var buf bytes.Buffer
		if err := report.WriteJSON(&buf, in); err != nil {
			b.Fatal(err)
		}
		if err := report.WriteCompareJSON(&buf, rows); err != nil {
			b.Fatal(err)
		}
		if err := report.WriteHTML(&buf, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "a", Input: in}}}); err != nil {
			b.Fatal(err)
		}
	}
}

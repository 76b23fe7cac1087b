package report_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// multiDevice records allocations on devices 0 to 2 of a trace that names
// seven, without capacities: devices 3 to 6 have no event.
func multiDevice(t *testing.T) *trace.Trace {
	cfg := config.Default()
	st := trace.NewStacks()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "seven.mrt",
		AllocatorSettings: cfg.AllocatorSettings()}, Stacks: st}
	for d := int32(0); d < 7; d++ {
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: d})
	}
	for d := int32(0); d < 3; d++ {
		a := newAllocator(t, 80<<30, cfg)
		rec := replay.Record(a, d, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
		rec.SetStack(st.Intern([]trace.Frame{{Name: "forward", Filename: "/src/model.py", Line: int64(d)}}))
		for i := 0; i < 3; i++ {
			_, err := a.Malloc(uint64(d+1)<<30+uint64(i)<<20, 0)
			require.NoError(t, err)
		}
		rec.Stop()
	}
	return tr
}

// The table of a multi-device replay has a column for each device that
// did something and none for the devices a trace only names, and says
// once, not once per device, that the capacity is not limited: the
// three-GPU table was 314 characters wide.
func TestMultiDeviceTableWidth(t *testing.T) {
	in := replayed(t, multiDevice(t), nil, false)
	require.Len(t, in.Result.Devices, 7)
	var b bytes.Buffer
	require.NoError(t, report.WriteTable(&b, in))
	out := b.String()
	t.Log("\n" + out)
	width := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			width = max(width, len(l))
		}
	}
	require.LessOrEqual(t, width, 130, "the table's width")
	header := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| figure") {
			header = l
		}
	}
	for _, d := range []string{"device 0", "device 1", "device 2", "total"} {
		require.Contains(t, header, d)
	}
	require.NotContains(t, header, "device 3")
	require.Equal(t, 1, strings.Count(out, "records no capacity"), "one capacity note")
	require.Contains(t, out, "devices 0-2: the trace records no capacity")
	require.Contains(t, out, "devices 3-6: no allocation and nothing reserved; left out of the table")

	// JSON lists the devices that hold something and counts the others.
	b.Reset()
	require.NoError(t, report.WriteJSON(&b, in))
	var v struct {
		Devices []struct {
			Index int32 `json:"index"`
		} `json:"devices"`
		EmptyDevices struct {
			Count  int    `json:"count"`
			Ranges string `json:"ranges"`
		} `json:"empty_devices"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &v))
	require.Len(t, v.Devices, 3)
	require.EqualValues(t, 2, v.Devices[2].Index)
	require.Equal(t, 4, v.EmptyDevices.Count)
	require.Equal(t, "3-6", v.EmptyDevices.Ranges)
}

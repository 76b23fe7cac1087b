package report_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
)

// runOn is a minimal replay of one device: on a real GPU (named, measured
// time) or on the simulator (modelled time).
func runOn(onGPU bool) (*replay.Result, *profiler.Profile) {
	c := gpu.Counters{ByCall: map[gpu.Call]gpu.Counter{gpu.CallMalloc: {Calls: 3, Time: 7 * time.Microsecond}},
		Total: gpu.Counter{Calls: 3, Time: 7 * time.Microsecond}}
	d := replay.DeviceResult{Capacity: 1 << 30, CapacitySource: "option", Counters: c}
	f := profiler.Figures{DeviceMallocs: 3, DeviceTimeNS: 7000}
	if onGPU {
		d.Name, d.TimeMeasured, d.CapacitySource = "NVIDIA H200, cuda:0", true, "device memory"
		f.DeviceTimeMeasured = true
	}
	return &replay.Result{Events: 3, Devices: []replay.DeviceResult{d}},
		&profiler.Profile{Events: 3, Total: f, Devices: []profiler.DeviceProfile{{Figures: f}}}
}

// The reports say whether the device time was measured on a real GPU or
// modelled by the simulator, and name the GPU.
func TestDeviceTimeMeasuredOrModelled(t *testing.T) {
	for _, onGPU := range []bool{false, true} {
		res, prof := runOn(onGPU)
		in := &report.Input{Result: res, Profile: prof}
		var tbl, js, cmp, cmpJS bytes.Buffer
		require.NoError(t, report.WriteTable(&tbl, in))
		require.NoError(t, report.WriteJSON(&js, in))
		rows := []report.CompareRow{{Label: "a", Result: res, Profile: prof}, {Label: "b", Result: res, Profile: prof}}
		require.NoError(t, report.WriteCompareTable(&cmp, rows))
		require.NoError(t, report.WriteCompareJSON(&cmpJS, rows))
		var out struct {
			DeviceCalls map[string]any   `json:"device_calls"`
			Devices     []map[string]any `json:"devices"`
			Notes       []string         `json:"notes"`
		}
		require.NoError(t, json.Unmarshal(js.Bytes(), &out))
		var cmpOut []struct {
			DeviceCalls map[string]any `json:"device_calls"`
		}
		require.NoError(t, json.Unmarshal(cmpJS.Bytes(), &cmpOut))
		if onGPU {
			require.Contains(t, tbl.String(), "measured device time")
			require.NotContains(t, tbl.String(), "modelled")
			require.Contains(t, tbl.String(), "NVIDIA H200, cuda:0")
			require.Contains(t, cmp.String(), "measured device time")
			require.Equal(t, "measured", out.DeviceCalls["time_source"])
			require.EqualValues(t, 7000, out.DeviceCalls["measured_time_ns"])
			require.EqualValues(t, 0, out.DeviceCalls["modelled_time_ns"])
			require.Equal(t, "NVIDIA H200, cuda:0", out.Devices[0]["name"])
			require.Equal(t, "measured", out.Devices[0]["time_source"])
			require.Empty(t, out.Notes, "the capacity's source is in the table, not a note")
			require.Equal(t, "measured", cmpOut[1].DeviceCalls["time_source"])
			require.EqualValues(t, 7000, cmpOut[1].DeviceCalls["measured_time_ns"])
		} else {
			require.Contains(t, tbl.String(), "modelled device time")
			require.NotContains(t, tbl.String(), "measured")
			require.Contains(t, cmp.String(), "modelled device time")
			require.Equal(t, "modelled", out.DeviceCalls["time_source"])
			require.EqualValues(t, 7000, out.DeviceCalls["modelled_time_ns"])
			require.EqualValues(t, 0, out.DeviceCalls["measured_time_ns"])
			require.Equal(t, "", out.Devices[0]["name"])
			require.Equal(t, "modelled", cmpOut[0].DeviceCalls["time_source"])
		}
	}
	// Columns of both kinds say which each is.
	r1, p1 := runOn(false)
	r2, p2 := runOn(true)
	var cmp bytes.Buffer
	require.NoError(t, report.WriteCompareTable(&cmp, []report.CompareRow{{Label: "sim", Result: r1, Profile: p1}, {Label: "gpu", Result: r2, Profile: p2}}))
	require.Contains(t, cmp.String(), "7.00µs (modelled)")
	require.Contains(t, cmp.String(), "7.00µs (measured)")
}

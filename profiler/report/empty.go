package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/replay"
)

// A trace may name far more devices than it uses (a header naming 60,000,
// a pickle of 60,000 empty device traces). Each device listed with its
// statistics costs kilobytes of output and more in the encoder, so the
// reports list the devices that hold something one by one and only
// count and name the others: their cost is that of the ranges that name
// them, not of the devices.

// jsonEmptyDevices is the "empty_devices" key of the JSON reports.
type jsonEmptyDevices struct {
	Count int `json:"count"`
	// Ranges names them, runs of consecutive indices as ranges: "1, 3-60001".
	Ranges string `json:"ranges"`
}

func emptyDevicesJSON(idle []int32) jsonEmptyDevices {
	return jsonEmptyDevices{Count: len(idle), Ranges: DeviceRanges(idle)}
}

// idleDevice is a device the replay did not use: no allocation, nothing
// reserved (not even a partial trace's initial state), no OOM, no device
// call. A trace may name such devices (an empty device_traces entry).
func idleDevice(d *replay.DeviceResult) bool {
	st := &d.Stats
	return st.ReservedBytes[allocator.StatAll].Peak == 0 && st.Allocation[allocator.StatAll].Allocated == 0 &&
		st.NumOOMs == 0 && d.Counters.Total.Calls == 0
}

// splitIdle returns the devices of res that the replay used and the
// indices of the others. A replay of one device keeps it, and so does one
// where every device is idle keep its first: a report shows at least one
// device's figures.
func splitIdle(res *replay.Result) (kept []replay.DeviceResult, idle []int32) {
	if res == nil {
		return nil, nil
	}
	if len(res.Devices) < 2 {
		return res.Devices, nil
	}
	for i := range res.Devices {
		if idleDevice(&res.Devices[i]) {
			idle = append(idle, res.Devices[i].Index)
		} else {
			kept = append(kept, res.Devices[i])
		}
	}
	if len(idle) == 0 {
		return res.Devices, nil
	}
	if len(kept) == 0 {
		kept, idle = res.Devices[:1], idle[1:]
	}
	return kept, idle
}

// deviceList names devices, runs of consecutive ones as ranges: "device
// 3", "devices 0-2, 5".
func deviceList(idx []int32) string {
	if len(idx) == 1 {
		return fmt.Sprintf("device %d", idx[0])
	}
	return "devices " + DeviceRanges(idx)
}

// DeviceRanges is "0-2, 5" for devices 0, 1, 2 and 5; "" for none (idx
// sorted).
func DeviceRanges(idx []int32) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(int(idx[i])))
		case j == i+1:
			parts = append(parts, strconv.Itoa(int(idx[i])), strconv.Itoa(int(idx[j])))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// A snapshot that lists many devices with no events (60,000 empty device
// traces) is one row of the table, its devices named as ranges, as the
// replay's reports name idle devices; the JSON keeps one entry each. The
// table once listed every device, after a scan of the header per device
// (4 s for this file).
func TestInspectNamesEmptyDevicesAsRanges(t *testing.T) {
	tr := &trace.Trace{Header: trace.Header{Version: trace.FormatVersion, Source: "pytorch-snapshot"}, Stacks: trace.NewStacks()}
	for i := int32(0); i < 60000; i++ {
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: i})
	}
	tr.Events = []trace.Event{{Action: trace.ActionAlloc, Device: 7, Addr: 1 << 21, Size: 512},
		{Action: trace.ActionFreeRequested, Device: 7, Addr: 1 << 21, Size: 512}}
	path := filepath.Join(t.TempDir(), "many.pickle")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, trace.WritePyTorch(f, tr))
	require.NoError(t, f.Close())

	code, stdout, stderr := runCLI("inspect", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "| devices, no events | 59999: 0-6, 8-59999")
	require.Contains(t, stdout, "| device 7           | 2 events, capacity unknown")
	require.Less(t, strings.Count(stdout, "\n"), 30, stdout)

	code, stdout, stderr = runCLI("inspect", "--format", "json", path)
	require.Equal(t, 0, code, stderr)
	var in struct {
		Devices []struct {
			Index  int32 `json:"index"`
			Events int64 `json:"events"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	require.Len(t, in.Devices, 60000)
	require.Equal(t, int64(2), in.Devices[7].Events)
}

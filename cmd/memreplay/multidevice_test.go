package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// twoGPUTrace writes a trace of one job on two GPUs of 1 GiB, the second
// loaded three times as heavily, so that their sum is more than either
// capacity.
func twoGPUTrace(t *testing.T) string {
	t.Helper()
	cfg := config.Default()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", AllocatorSettings: cfg.AllocatorSettings()}, Stacks: trace.NewStacks()}
	var as []*allocator.Allocator
	for d := 0; d < 2; d++ {
		card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
		require.NoError(t, err)
		proc, err := card.NewProcess()
		require.NoError(t, err)
		a, err := allocator.New(proc, cfg, allocator.WithDeviceIndex(d))
		require.NoError(t, err)
		replay.Record(a, int32(d), func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
		as = append(as, a)
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: int32(d), Capacity: 1 << 30})
	}
	for i := 0; i < 200; i++ {
		d := i % 2
		_, err := as[d].Malloc(uint64(2+6*d)<<20, 0)
		if !errors.Is(err, allocator.ErrOutOfMemory) {
			require.NoError(t, err)
		}
	}
	path := filepath.Join(t.TempDir(), "two-gpus.mrt")
	require.NoError(t, trace.WriteFile(path, tr))
	return path
}

// TestCompareAndReportSeveralGPUs: compare and report on a trace of two
// GPUs give each device against its own capacity and say which figures
// are sums (issue: a summed 31.41 GiB printed above a 24 GiB capacity).
func TestCompareAndReportSeveralGPUs(t *testing.T) {
	path := twoGPUTrace(t)
	code, out, stderr := runCLI("compare", path, "--alloc-conf", "expandable_segments:True")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `\| device 1: capacity +\| +1024\.00 MiB \(trace header\) \|`, out)
	assert.Regexp(t, `\| device 1: peak live +\| +800\.00 MiB \|`, out)
	assert.Regexp(t, `\| peak live, 2 devices summed at one moment +\| +1000\.00 MiB \|`, out)
	assert.NotRegexp(t, `(?m)^\| peak live +\|`, out)

	html := filepath.Join(t.TempDir(), "r.html")
	code, _, stderr = runCLI("report", path, "-o", html)
	require.Equal(t, 0, code, stderr)
	page, err := os.ReadFile(html)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`"timeline":\{[^}]*"devices":\[\{"index":0,`), string(page), "a timeline per device")
	assert.Contains(t, string(page), "device 1: peak live (event")
}

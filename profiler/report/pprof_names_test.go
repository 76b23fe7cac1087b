package report_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// pprof shows Python's frame names as written. It takes a name with angle
// brackets or parentheses for a demangled C++ one and cuts the template
// arguments and parameters out of it, which left "<module>" and
// "<listcomp>" empty: pprof then showed the mapping, "[python]", in their
// place.
func TestPprofKeepsNamesAsWritten(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run pprof")
	}
	cfg := config.Default()
	a := newAllocator(t, 1<<30, cfg)
	st := trace.NewStacks()
	alloc := trace.Frame{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", Filename: "CUDACachingAllocator.cpp"}
	module := trace.Frame{Name: "<module>", Filename: "/src/train.py", Line: 1}
	names := []string{"<listcomp>", "<genexpr>", "forward(x)", "<lambda>"}
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "names.mrt",
		AllocatorSettings: cfg.AllocatorSettings(), Devices: []trace.Device{{Index: 0, Capacity: 1 << 30}}}, Stacks: st}
	rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	for i, n := range names {
		rec.SetStack(st.Intern([]trace.Frame{alloc, {Name: n, Filename: "/src/model.py", Line: int64(10 + i)}, module}))
		_, err := a.Malloc(uint64(i+1)<<20, 0)
		require.NoError(t, err)
	}
	rec.Stop()

	var buf bytes.Buffer
	require.NoError(t, report.WritePprof(&buf, replayed(t, tr, nil, false)))
	file := filepath.Join(t.TempDir(), "mem.pb.gz")
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))
	out, err := exec.Command(goBin, "tool", "pprof", "-top", "-nodefraction=0", file).CombinedOutput()
	if err != nil {
		t.Skipf("go tool pprof did not run: %v\n%s", err, out)
	}
	shown := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 6 && strings.HasSuffix(f[1], "%") {
			shown[strings.Join(f[5:], " ")] = true
		}
	}
	for _, n := range append(names, "<module>") {
		require.True(t, shown[n], "pprof -top does not show %q:\n%s", n, out)
	}
	require.False(t, shown["[python]"], "a name replaced by the mapping's:\n%s", out)
}

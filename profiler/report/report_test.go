package report_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const MiB = 1 << 20

// recordTrainingLike records a small training-like workload on a 300 MiB
// device: weights that stay, three iterations of activations (the largest
// site at the peak), attention scratch freed at once, a few long-lived
// gradient buffers that pin segments, and a last request that runs out of
// memory.
func recordTrainingLike(t *testing.T) *trace.Trace {
	t.Helper()
	const capacity = 300 * MiB
	cfg := config.Default()
	a := newAllocator(t, capacity, cfg)
	st := trace.NewStacks()
	frame := func(name, file string, line int64) trace.Frame {
		return trace.Frame{Name: name, Filename: file, Line: line}
	}
	alloc := frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", "CUDACachingAllocator.cpp", 0)
	main := frame("main", "/src/train.py", 90)
	sWeights := st.Intern([]trace.Frame{alloc, frame("load_weights", "/src/model.py", 10), main})
	sAct := st.Intern([]trace.Frame{alloc, frame("forward", "/src/model.py", 20), frame("step", "/src/train.py", 50), main})
	sScratch := st.Intern([]trace.Frame{alloc, frame("attention", "/src/model.py", 30), frame("forward", "/src/model.py", 21), frame("step", "/src/train.py", 50), main})
	sGrad := st.Intern([]trace.Frame{alloc, frame("backward", "/src/train.py", 60), frame("step", "/src/train.py", 51), main})
	sHuge := st.Intern([]trace.Frame{alloc, frame("evaluate", "/src/train.py", 70), main})

	tr := &trace.Trace{
		Header: trace.Header{Source: "memreplay", SourceFile: "training-like.mrt",
			AllocatorSettings: cfg.AllocatorSettings(), Devices: []trace.Device{{Index: 0, Capacity: capacity}}},
		Stacks: st,
	}
	rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	malloc := func(size uint64, stack trace.StackID) *allocator.Block {
		rec.SetStack(stack)
		b, err := a.Malloc(size, 0)
		require.NoError(t, err)
		return b
	}
	free := func(b *allocator.Block) { require.NoError(t, a.Free(b)) }

	for i := 0; i < 3; i++ {
		malloc(30*MiB, sWeights)
	}
	var grads []*allocator.Block
	for it := 0; it < 3; it++ {
		var acts []*allocator.Block
		for i := 0; i < 8; i++ {
			acts = append(acts, malloc(6*MiB, sAct))
			s := malloc(4*MiB+512, sScratch)
			free(s)
		}
		grads = append(grads, malloc(3*MiB, sGrad))
		for _, b := range acts {
			free(b)
		}
	}
	_ = grads
	rec.SetStack(sHuge)
	_, err := a.Malloc(400*MiB, 0)
	require.ErrorIs(t, err, allocator.ErrOutOfMemory)
	rec.Stop()
	tr.Final = replay.SnapshotSegments(a.Snapshot())
	tr.HasFinal = true
	return tr
}

// newAllocator is an allocator with settings cfg on a fresh GPU of
// capacity bytes without a CUDA context.
func newAllocator(t testing.TB, capacity uint64, cfg config.Config, opts ...allocator.Option) *allocator.Allocator {
	t.Helper()
	card, err := gpu.New(gpu.Options{Capacity: capacity, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	a, err := allocator.New(proc, cfg, opts...)
	require.NoError(t, err)
	return a
}

// replayed replays tr (under conf when not nil) with the profiler.
func replayed(t testing.TB, tr *trace.Trace, conf *config.Config, check bool) *report.Input {
	t.Helper()
	p := profiler.New(tr.Stacks, profiler.Options{})
	res, err := replay.Run(tr.NewReader(), replay.Options{Name: tr.Header.SourceFile, Recorder: p, Check: check,
		Config: conf, OOM: replay.OOMSkip})
	require.NoError(t, err)
	return &report.Input{Trace: tr.Header, Result: res, Profile: p.Finish(), Stacks: tr.Stacks}
}

// keyPaths lists every key of a JSON value as a path, arrays as "[]".
func keyPaths(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if prefix == "stats" || strings.HasSuffix(prefix, "].stats") || strings.HasSuffix(prefix, "].calls") || strings.HasSuffix(prefix, ".stats") {
				// The statistics' own keys are allocator.Stats.Map's,
				// tested there; one is enough here.
				if k != "reserved_bytes.all.peak" && k != "cudaMalloc" {
					continue
				}
			}
			out[p] = true
			keyPaths(p, e, out)
		}
	case []any:
		for _, e := range x {
			keyPaths(prefix+"[]", e, out)
		}
	}
}

func TestJSONKeys(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, true)
	// A reconstruction, so that its keys show too.
	in.Result.Reconstructed = &replay.Reconstruction{Segments: 1, SegmentBytes: 20 * MiB, Notes: []string{"x"}}
	var buf bytes.Buffer
	require.NoError(t, report.WriteJSON(&buf, in))
	var v map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &v))

	paths := map[string]bool{}
	keyPaths("", v, paths)
	var got []string
	for p := range paths {
		got = append(got, p)
	}
	sort.Strings(got)
	golden := filepath.Join("testdata", "json_keys.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -update to create the golden file")
	assert.Equal(t, string(want), strings.Join(got, "\n")+"\n")

	// DESIGN.md's contract, spelled out.
	for _, k := range []string{"stats", "fragmentation", "events", "check", "ooms", "config", "capacity", "reconstructed", "top_sites", "timeline"} {
		assert.Contains(t, v, k)
	}
	fr := v["fragmentation"].(map[string]any)
	for _, k := range []string{"peak_live_bytes", "peak_reserved_bytes", "waste_ratio", "largest_free_block_bytes_at_peak",
		"internal_waste_bytes_at_peak", "external_fragmentation_at_peak"} {
		assert.Contains(t, fr, k)
	}
	ck := v["check"].(map[string]any)
	for _, k := range []string{"decisions_expected", "decisions_matched", "first_divergence", "final_segments_match"} {
		assert.Contains(t, ck, k)
	}
	assert.Nil(t, ck["first_divergence"], "the replay of a recording under its own settings matches")
	assert.Equal(t, true, ck["final_segments_match"])
	assert.Equal(t, ck["decisions_expected"], ck["decisions_matched"])

	// The figures agree with the statistics.
	stats := v["stats"].(map[string]any)
	assert.Equal(t, stats["reserved_bytes.all.peak"], fr["peak_reserved_bytes"])
	assert.Equal(t, stats["allocated_bytes.all.peak"], fr["peak_live_bytes"])
	assert.Equal(t, float64(300*MiB), v["capacity"])
	assert.Equal(t, "", v["config"])
	top := v["top_sites"].([]any)
	require.NotEmpty(t, top)
	assert.Equal(t, "load_weights (/src/model.py:10)", top[0].(map[string]any)["label"])
	strand := v["top_stranding_sites"].([]any)
	require.NotEmpty(t, strand)
	assert.Equal(t, "attention (/src/model.py:30)", strand[0].(map[string]any)["label"],
		"the scratch block's free neighbours are pinned by it")
	require.Len(t, v["ooms"].([]any), 1)

	// Without a check the key is absent, not null.
	in.Result.Check = nil
	buf.Reset()
	require.NoError(t, report.WriteJSON(&buf, in))
	v = nil
	require.NoError(t, json.Unmarshal(buf.Bytes(), &v))
	assert.NotContains(t, v, "check")
}

func TestTableAndMarkdown(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, true)
	prof := in.Profile

	var tb bytes.Buffer
	require.NoError(t, report.WriteTable(&tb, in))
	out := tb.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"memreplay replay: training-like.mrt (memreplay)",
		"| peak live", allocator.FormatSize(prof.Total.PeakLiveBytes),
		"| peak reserved", allocator.FormatSize(prof.Total.PeakReservedBytes),
		"| config", "defaults (trace)",
		"| largest free block at peak",
		"| device calls", "cudaMalloc ",
		"Top 4 allocation sites at peak",
		"forward (model.py:20)", // short names in tables
		"check PASSED:",
		"final segments: match",
		"Out of memory",
		"(the recording failed here too)",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "PEAK", "no header auto-formatting")

	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, in))
	m := md.String()
	t.Log("\n" + m)
	assert.True(t, strings.HasPrefix(m, "# memreplay replay: training-like.mrt (memreplay)\n"))
	assert.Contains(t, m, "## Top 4 allocation sites at peak")
	assert.Contains(t, m, "| figure")
	assert.Contains(t, m, "|:---")
	assert.Contains(t, m, "- check PASSED:")
	assert.Contains(t, m, "load\\_weights (model.py:10)", "markup is escaped")
}

func TestMarkdownEscapesPipes(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, false)
	in.Stacks = nil // the labels, not the frames, then
	in.Profile.Sites[0].Label = "f|g"
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, in))
	assert.Contains(t, md.String(), "f\\|g")
}

func TestCompare(t *testing.T) {
	tr := recordTrainingLike(t)
	exp, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	rows := []report.CompareRow{}
	for _, c := range []struct {
		label string
		conf  *config.Config
	}{{"recorded settings", nil}, {"expandable_segments:True", &exp}} {
		in := replayed(t, tr, c.conf, false)
		rows = append(rows, report.CompareRow{Label: c.label, Result: in.Result, Profile: in.Profile})
	}
	var tb bytes.Buffer
	require.NoError(t, report.WriteCompareTable(&tb, rows))
	t.Log("\n" + tb.String())
	for _, want := range []string{"recorded settings", "expandable_segments:True", "peak reserved", "first OOM", "cuMemMap", "modelled device time"} {
		assert.Contains(t, tb.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, report.WriteCompareJSON(&js, rows))
	var v []map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &v))
	require.Len(t, v, 2)
	assert.Equal(t, "expandable_segments:True", v[1]["config"])
	assert.Contains(t, v[0]["fragmentation"], "peak_reserved_bytes")
	assert.NotNil(t, v[0]["first_oom_event"])
	calls := v[1]["device_calls"].(map[string]any)
	assert.Greater(t, calls["cu_mem_map"].(float64), 0.0)
}

func TestPprof(t *testing.T) {
	tr := recordTrainingLike(t)
	in := replayed(t, tr, nil, false)
	var buf bytes.Buffer
	require.NoError(t, report.WritePprof(&buf, in))
	p, err := profile.Parse(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	assert.Equal(t, []string{"inuse_space/bytes", "reserved_space/bytes", "waste_space/bytes", "alloc_count/count", "alloc_space/bytes"}, types)
	assert.Equal(t, "inuse_space", p.DefaultSampleType)
	require.Len(t, p.Mapping, 1)
	assert.True(t, p.Mapping[0].HasFunctions)

	// Sum the values per leaf function.
	leaf := map[string][]int64{}
	sums := make([]int64, len(p.SampleType))
	for _, s := range p.Sample {
		require.NotEmpty(t, s.Location)
		name := s.Location[0].Line[0].Function.Name
		if leaf[name] == nil {
			leaf[name] = make([]int64, len(s.Value))
		}
		for i, v := range s.Value {
			leaf[name][i] += v
			sums[i] += v
		}
		if s.Value[0] > 0 {
			assert.Equal(t, []string{"0"}, s.Label["device"])
			assert.Equal(t, []string{"0"}, s.Label["stream"])
		}
	}
	prof := in.Profile
	assert.Equal(t, int64(prof.Total.PeakLiveBytes), sums[0], "inuse_space adds up to the peak")
	assert.Equal(t, int64(prof.Total.StrandedBytesAtPeak), sums[2])
	assert.Equal(t, int64(prof.Total.Allocs), sums[3])
	var forward *profiler.Site
	for i := range prof.Sites {
		if prof.Sites[i].Label == "forward (/src/model.py:20)" {
			forward = &prof.Sites[i]
		}
	}
	require.NotNil(t, forward)
	assert.Equal(t, int64(forward.LiveBytesAtPeak), leaf["forward"][0])
	assert.Equal(t, int64(forward.AllocCount), leaf["forward"][3])
	assert.Equal(t, int64(24), leaf["forward"][3], "8 activations in each of 3 iterations")

	// The stack is leaf first, without the allocator's own frame.
	for _, s := range p.Sample {
		if s.Location[0].Line[0].Function.Name == "attention" {
			var names []string
			for _, l := range s.Location {
				names = append(names, l.Line[0].Function.Name)
			}
			assert.Equal(t, []string{"attention", "forward", "step", "main"}, names)
			break
		}
	}
	// One Location per distinct frame: forward:20 and forward:21 differ.
	seen := map[string]bool{}
	for _, l := range p.Location {
		k := l.Line[0].Function.Name + ":" + l.Line[0].Function.Filename + ":" + string(rune(l.Line[0].Line))
		assert.False(t, seen[k], "location %s twice", k)
		seen[k] = true
	}

	// pprof itself reads it, and names the top site first.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run pprof")
	}
	file := filepath.Join(t.TempDir(), "mem.pb.gz")
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))
	cmd := exec.Command(goBin, "tool", "pprof", "-top", file)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("go tool pprof did not run: %v\n%s", err, outb)
	}
	t.Log("\n" + string(outb))
	lines := strings.Split(string(outb), "\n")
	var first string
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			first = lines[i+1]
			break
		}
	}
	assert.True(t, strings.HasSuffix(strings.TrimSpace(first), " load_weights"), "top line %q", first)
}

// TestWithoutProfile: two devices and no profiler; the reports fall back on
// the allocator's statistics and sum them over the devices.
func TestWithoutProfile(t *testing.T) {
	var s0, s1 allocator.Stats
	s0.ReservedBytes[allocator.StatAll] = allocator.Stat{Current: 20 * MiB, Peak: 40 * MiB}
	s0.AllocatedBytes[allocator.StatAll] = allocator.Stat{Current: 10 * MiB, Peak: 30 * MiB}
	s1.ReservedBytes[allocator.StatAll] = allocator.Stat{Current: 2 * MiB, Peak: 60 * MiB}
	s1.AllocatedBytes[allocator.StatAll] = allocator.Stat{Current: 1 * MiB, Peak: 45 * MiB}
	s0.NumAllocRetries, s1.NumAllocRetries = 1, 2
	s0.MaxSplitSize, s1.MaxSplitSize = -1, -1
	in := &report.Input{Result: &replay.Result{Events: 7, Config: config.Default(), ConfigSource: "default", Devices: []replay.DeviceResult{
		{Index: 0, Capacity: 80 * MiB, Stats: s0}, {Index: 1, Capacity: 80 * MiB, Stats: s1}}}}
	var buf bytes.Buffer
	require.NoError(t, report.WriteJSON(&buf, in))
	var v map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &v))
	stats := v["stats"].(map[string]any)
	assert.Equal(t, float64(100*MiB), stats["reserved_bytes.all.peak"], "summed peaks")
	assert.Equal(t, float64(3), stats["num_alloc_retries"])
	assert.Equal(t, float64(-1), stats["max_split_size"], "a setting, not summed")
	fr := v["fragmentation"].(map[string]any)
	assert.Equal(t, float64(100*MiB), fr["peak_reserved_bytes"])
	assert.InDelta(t, 1-75.0/100, fr["waste_ratio"], 1e-12)
	assert.Len(t, v["devices"], 2)
	assert.Nil(t, fr["peak_live_event"], "unknown without the profiler")

	var tb bytes.Buffer
	require.NoError(t, report.WriteTable(&tb, in))
	t.Log("\n" + tb.String())
	assert.Contains(t, tb.String(), "| device 0 ")
	assert.Contains(t, tb.String(), "| total ")
	assert.Contains(t, tb.String(), "60.00 MiB")
	assert.NotContains(t, tb.String(), "initial state")
	assert.Error(t, report.WritePprof(&buf, in), "pprof needs a profile")
}

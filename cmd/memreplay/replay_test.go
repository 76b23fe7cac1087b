package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const (
	completeTrace = "../../traces/pytorch/cs336_silmont2000_mem_snapshot.pickle"
	partialTrace  = "../../traces/pytorch/cs336_silmont2000_memory_forward_fp32_128.pickle"
)

func TestReplayReportsARealTrace(t *testing.T) {
	code, stdout, stderr := runCLI("replay", partialTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "reconstructed")
	require.Contains(t, stdout, "| events                         | 2043 ") // the entries; the 2 external_annotations are beside them
}

func TestReplayCheckJSON(t *testing.T) {
	code, stdout, stderr := runCLI("replay", "--check", "--format", "json", completeTrace)
	require.Equal(t, 0, code, stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	for _, k := range []string{"stats", "fragmentation", "events", "check"} {
		require.Contains(t, out, k)
	}
	check := out["check"].(map[string]any)
	require.EqualValues(t, 45, check["decisions_expected"])
	require.EqualValues(t, 45, check["decisions_matched"])
	require.Nil(t, check["first_divergence"])
	require.Equal(t, true, check["final_segments_match"])
	require.EqualValues(t, 97, out["events"])
	stats := out["stats"].(map[string]any)
	require.EqualValues(t, 9, stats["num_device_alloc"])
	frag := out["fragmentation"].(map[string]any)
	for _, k := range []string{"peak_live_bytes", "peak_reserved_bytes", "waste_ratio", "largest_free_block_bytes_at_peak"} {
		require.Contains(t, frag, k)
	}
}

func TestReplayCheckFailsUnderOtherSettings(t *testing.T) {
	code, stdout, stderr := runCLI("replay", "--check", "--alloc-conf", "expandable_segments:True", "--format", "json", completeTrace)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "check failed")
	require.Contains(t, stderr, "first divergence at device 0, event 0")
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	div := out["check"].(map[string]any)["first_divergence"].(map[string]any)
	require.EqualValues(t, 0, div["event"])
}

func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(completeTrace)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "cut.pickle")
	require.NoError(t, os.WriteFile(truncated, data[:1000], 0o644))
	hostile := filepath.Join(dir, "evil.pickle")
	require.NoError(t, os.WriteFile(hostile, []byte("\x80\x04\x95\x1e\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x02id\x94\x85\x94R\x94."), 0o644))
	junk := filepath.Join(dir, "junk.bin")
	require.NoError(t, os.WriteFile(junk, []byte("hello"), 0o644))
	badRMM := filepath.Join(dir, "bad.csv")
	require.NoError(t, os.WriteFile(badRMM, []byte("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,0x100,16,0x0\n1,00:00:00.000002,free,0x100,16,0x0\n1,00:00:00.000003,free,0x100,16,0x0\n"), 0o644))

	for _, c := range []struct{ file, want string }{
		{truncated, "cut.pickle: byte offset"},
		{hostile, "evil.pickle: byte offset"},
		{junk, "junk.bin: byte offset 0: not a trace"},
		{badRMM, "bad.csv: event 3: free of unknown address 0x100"},
		{filepath.Join(dir, "missing.pickle"), "missing.pickle"},
	} {
		code, _, stderr := runCLI("replay", c.file)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, c.want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	}
	code, _, stderr := runCLI("replay", "--lenient", badRMM)
	require.Equal(t, 0, code, stderr)
}

func TestConvertThenReplayStreams(t *testing.T) {
	out := filepath.Join(t.TempDir(), "fwd.mrt")
	code, stdout, stderr := runCLI("convert", partialTrace, out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "2043 events")

	_, direct, _ := runCLI("replay", "--check", "--format", "json", partialTrace)
	code, native, stderr := runCLI("replay", "--check", "--format", "json", out)
	require.Equal(t, 0, code, stderr)
	var a, b map[string]any
	require.NoError(t, json.Unmarshal([]byte(direct), &a))
	require.NoError(t, json.Unmarshal([]byte(native), &b))
	require.Equal(t, a["stats"], b["stats"])
	require.Equal(t, a["check"], b["check"])
	require.Len(t, a["markers"], 2)
	require.Equal(t, a["markers"], b["markers"], "the annotations, kept by the native format")
	// max_external_fragmentation is the largest over the timeline's
	// samples, and a snapshot's known length samples every 3 events here
	// where a streamed trace's doubling interval ends at 4: the two agree
	// only when both schedules happen to take the event that has it (they
	// did until the snapshot's two annotations moved the events by two).
	fa, fb := a["fragmentation"].(map[string]any), b["fragmentation"].(map[string]any)
	delete(fa, "max_external_fragmentation")
	delete(fb, "max_external_fragmentation")
	require.Equal(t, fa, fb)

	code, stdout, stderr = runCLI("inspect", "--format", "json", out)
	require.Equal(t, 0, code, stderr)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	require.Equal(t, "native", in["format"])
	require.Equal(t, true, in["initial_reconstructed"])
	require.EqualValues(t, 2043, in["events"])
	require.EqualValues(t, 2, in["annotations"], "the annotations survive the conversion")
}

func TestInspect(t *testing.T) {
	code, stdout, stderr := runCLI("inspect", completeTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "pytorch-snapshot")
	require.Contains(t, stdout, "yes: 9 recorded decisions, 36 alloc addresses")
	require.Contains(t, stdout, "empty (recorded from the start)")
}

func TestCompare(t *testing.T) {
	code, stdout, stderr := runCLI("compare", partialTrace, "--alloc-conf", "expandable_segments:True", "--alloc-conf", "max_split_size_mb:64")
	require.Equal(t, 0, code, stderr)
	for _, s := range []string{"recorded settings", "expandable_segments:True", "max_split_size_mb:64"} {
		require.Contains(t, stdout, s)
	}
	code, _, stderr = runCLI("compare", partialTrace, "--alloc-conf", "max_split_size_mb:1")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "max_split_size_mb")
}

func TestReplayPprof(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mem.pb.gz")
	code, _, stderr := runCLI("replay", "--pprof", out, partialTrace)
	require.Equal(t, 0, code, stderr)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	p, err := profile.Parse(f)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	require.NotEmpty(t, p.Sample)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH: not checking go tool pprof")
	}
	cmd := exec.Command(goTool, "tool", "pprof", "-top", out)
	top, err := cmd.CombinedOutput()
	require.NoError(t, err, string(top))
	require.Contains(t, string(top), "flat")
}

// The blocks a partial trace held before its first event, without stacks
// of their own (the model's weights), are named as such in the sites.
func TestReplayNamesBlocksFromBeforeTheTrace(t *testing.T) {
	code, stdout, stderr := runCLI("replay", "--format", "json", partialTrace)
	require.Equal(t, 0, code, stderr)
	var rep struct {
		TopSites []struct {
			Label     string `json:"label"`
			LiveBytes uint64 `json:"live_bytes_at_peak"`
			Blocks    int    `json:"blocks_at_peak"`
			Allocs    int    `json:"alloc_count"`
		} `json:"top_sites"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.NotEmpty(t, rep.TopSites)
	s := rep.TopSites[0]
	require.Equal(t, replay.BeforeTraceFrame.Name, s.Label)
	require.Equal(t, 137, s.Blocks) // the 137 reconstructed live blocks
	require.Equal(t, uint64(525286400), s.LiveBytes)
	require.Zero(t, s.Allocs, "allocated before the trace, not during it")
}

// A trace that records no capacity and implies none replays on a device
// too large to run out; the table says so rather than print its size.
func TestReplayTableUnknownCapacity(t *testing.T) {
	code, stdout, stderr := runCLI("replay", partialTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "not limited (the trace records none; --capacity sets one)")
	// Said once: the notes used to repeat it in other words.
	require.NotContains(t, stdout, "records no capacity")
	code, stdout, stderr = runCLI("replay", "--capacity", "24GiB", partialTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "24.00 GiB (option)")
}

// Several traces replay one after another, each with its own report: a
// table each, or one JSON object each; the exit code is 1 if any check
// failed, after every trace was replayed; --pprof, --html and --record take
// one trace.
func TestReplaySeveralTraces(t *testing.T) {
	trial := "../../traces/trial/bert-base_b16_s128_fp16.mrt"
	code, stdout, stderr := runCLI("replay", partialTrace, trial)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, "cs336_silmont2000_memory_forward_fp32_128.pickle (pytorch-snapshot)"))
	require.Equal(t, 1, strings.Count(stdout, "bert-base_b16_s128_fp16.mrt (memreplay-trial)"))
	require.Equal(t, 2, strings.Count(stdout, "Top 10 allocation sites at peak"))

	code, stdout, stderr = runCLI("replay", "--check", "--format", "json", completeTrace, partialTrace)
	require.Equal(t, 0, code, stderr)
	dec := json.NewDecoder(strings.NewReader(stdout))
	var files []string
	for dec.More() {
		var rep struct {
			File  string `json:"file"`
			Check struct {
				Passed bool `json:"passed"`
			} `json:"check"`
		}
		require.NoError(t, dec.Decode(&rep))
		require.True(t, rep.Check.Passed, rep.File)
		files = append(files, filepath.Base(rep.File))
	}
	require.Equal(t, []string{filepath.Base(completeTrace), filepath.Base(partialTrace)}, files)

	// A check that fails on the first trace still replays the second.
	code, stdout, stderr = runCLI("replay", "--check", "--alloc-conf", "max_split_size_mb:20", "--format", "json", completeTrace, partialTrace)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, filepath.Base(completeTrace)+": check failed")
	require.Equal(t, 2, strings.Count(stdout, `"events"`))

	for _, f := range []string{"--pprof", "--html", "--record"} {
		code, _, stderr = runCLI("replay", f, filepath.Join(t.TempDir(), "x.out"), completeTrace, partialTrace)
		require.Equal(t, 2, code, f)
		require.Contains(t, stderr, f+" takes one trace")
	}
}

// --expect-stats compares the replay's statistics with a memory_stats()
// JSON: the replay's own statistics pass, one exact key changed fails with
// exit 1 and names the key, an inferred key changed only shows, and bad
// files or flags are exit 2 naming the file.
func TestReplayExpectStats(t *testing.T) {
	code, stdout, stderr := runCLI("replay", "--format", "json", completeTrace)
	require.Equal(t, 0, code, stderr)
	var out struct {
		Stats map[string]int64 `json:"stats"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	dir := t.TempDir()
	write := func(name string, m map[string]int64) string {
		p := filepath.Join(dir, name)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	same := write("same.stats.json", out.Stats)
	code, stdout, stderr = runCLI("replay", "--expect-stats", same, completeTrace)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "memory_stats() check PASSED: ")
	require.Contains(t, stdout, "inferred keys: ")

	changed := map[string]int64{}
	for k, v := range out.Stats {
		changed[k] = v
	}
	changed["reserved_bytes.all.peak"] += 2 << 20
	changed["num_sync_all_streams"] += 1
	bad := write("changed.stats.json", changed)
	code, stdout, stderr = runCLI("replay", "--expect-stats", bad, "--format", "json", completeTrace)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "memory_stats() check failed")
	var res struct {
		StatsCheck struct {
			Passed      bool `json:"passed"`
			Differences []struct {
				Key   string `json:"key"`
				Exact bool   `json:"exact"`
			} `json:"differences"`
		} `json:"stats_check"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.False(t, res.StatsCheck.Passed)
	require.Len(t, res.StatsCheck.Differences, 2)
	require.Equal(t, "num_sync_all_streams", res.StatsCheck.Differences[0].Key)
	require.False(t, res.StatsCheck.Differences[0].Exact)
	require.Equal(t, "reserved_bytes.all.peak", res.StatsCheck.Differences[1].Key)
	require.True(t, res.StatsCheck.Differences[1].Exact)

	code, stdout, _ = runCLI("replay", "--expect-stats", bad, completeTrace)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "memory_stats() check FAILED")
	require.Regexp(t, `reserved_bytes\.all\.peak +\| +\d+ +\| +\d+ +\| exact`, stdout)

	broken := filepath.Join(dir, "broken.stats.json")
	require.NoError(t, os.WriteFile(broken, []byte(`{"num_ooms": 0, "x": }`), 0o644))
	code, _, stderr = runCLI("replay", "--expect-stats", broken, completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, broken+": byte offset 21: memory_stats: invalid character")

	code, _, stderr = runCLI("replay", "--expect-stats", same, completeTrace, partialTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--expect-stats takes one trace")
	code, _, stderr = runCLI("replay", "--expect-stats-device", "1", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--expect-stats-device needs --expect-stats")
	code, _, stderr = runCLI("replay", "--expect-stats", same, "--expect-stats-device", "3", completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "memory_stats of device 3, which the trace")
}

// An output that cannot be written fails before the replay, exit 2, naming
// the flag and the path; a --pprof written is whole (the temporary file is
// renamed over it) and nothing else is left beside it.
func TestOutputsCheckedBeforeTheReplay(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "x.pb.gz")
	for _, args := range [][]string{
		{"replay", "--pprof", missing, completeTrace},
		{"replay", "--html", missing, completeTrace},
		{"compare", "--alloc-conf", "expandable_segments:True", "--html", missing, completeTrace},
		{"report", "-o", missing, completeTrace},
		{"par", "--html", missing},
	} {
		code, stdout, stderr := runCLI(args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, missing+": cannot create a file in "+filepath.Dir(missing), args)
		require.Empty(t, stdout, "%v: nothing ran", args)
	}
	code, _, stderr := runCLI("replay", "--pprof", dir, completeTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--pprof "+dir+": is a directory")

	out := filepath.Join(dir, "mem.pb.gz")
	code, _, stderr = runCLI("replay", "--pprof", out, completeTrace)
	require.Equal(t, 0, code, stderr)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	_, err = profile.Parse(f)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only mem.pb.gz: no temporary file left")
}

// inspect counts a snapshot's events while it is imported, and a native
// trace's as it reads them: the same snapshot both ways gives the same
// counts, times, devices and states.
func TestInspectPickleMatchesNative(t *testing.T) {
	for _, pk := range []string{partialTrace, completeTrace} {
		mrt := filepath.Join(t.TempDir(), "x.mrt")
		code, _, stderr := runCLI("convert", "-q", pk, mrt)
		require.Equal(t, 0, code, stderr)
		var got [2]map[string]any
		for i, f := range []string{pk, mrt} {
			code, stdout, stderr := runCLI("inspect", "--format", "json", f)
			require.Equal(t, 0, code, stderr)
			require.NoError(t, json.Unmarshal([]byte(stdout), &got[i]))
		}
		require.Greater(t, got[0]["events"], float64(50))
		for _, k := range []string{"events", "actions", "decisions", "devices", "first_time_us", "last_time_us", "stacks", "frames", "initial", "initial_reconstructed", "final", "checkable"} {
			require.Equal(t, got[0][k], got[1][k], "%s: %s", pk, k)
		}
	}
}

// A snapshot's external_annotations are beside the events: the events are
// the snapshot's entries (2043, as memory_viz counts them; they were 2045
// with the annotations merged in), inspect counts the annotations and
// lists them with the markers by label, with their START and END counts,
// and the JSON report has them.
func TestInspectAnnotationMarkers(t *testing.T) {
	code, stdout, stderr := runCLI("inspect", "--format", "json", partialTrace)
	require.Equal(t, 0, code, stderr)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	require.EqualValues(t, 2043, in["events"])
	require.EqualValues(t, 2, in["annotations"])
	require.Equal(t, map[string]any{"alloc": 681.0, "free_requested": 681.0, "free_completed": 681.0}, in["actions"])
	assert.Equal(t, []any{map[string]any{"label": "Optimizer.zero_grad#AdamW.zero_grad", "count": 2.0, "start": 1.0, "end": 1.0,
		"first_event": 0.0}}, in["markers"])
	assert.NotContains(t, stdout, "not imported")

	code, stdout, stderr = runCLI("inspect", partialTrace)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"Optimizer.zero_grad#AdamW.zero_grad" | 2 (record_function: 1 START, 1 END), first at event 0`)
	assert.Contains(t, stdout, `annotations`)

	code, stdout, stderr = runCLI("replay", "--format", "json", partialTrace)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	require.Len(t, in["markers"], 2)
	assert.Equal(t, "START", in["markers"].([]any)[0].(map[string]any)["stage"])
}

// inspect lists labels by first appearance: an annotation that comes
// before event N appears before the marker that is event N (before, the
// marker's label came first), and the annotations' labels among
// themselves by their event. A native trace's markers are at their own
// index (inspect counted every event of a file it streams as event 0).
func TestInspectAnnotationBeforeMarker(t *testing.T) {
	st := trace.NewStacks()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: st, Events: []trace.Event{
		{Action: trace.ActionAlloc, Addr: 1 << 20, Size: 512, TimeUS: 1},
		{Action: trace.ActionMarker, Label: "step 1", TimeUS: 2},
		{Action: trace.ActionFreeRequested, Addr: 1 << 20, Size: 512, TimeUS: 3},
	}, Annotations: []trace.Annotation{
		{Device: 0, TimeUS: 1, Name: "late", Stage: "START", Event: 2},
		{Device: 0, TimeUS: 2, Name: "fwd", Stage: "START", Event: 1},
		{Device: 0, TimeUS: 3, Name: "fwd", Stage: "END", Event: 3},
	}}
	path := filepath.Join(t.TempDir(), "a.mrt")
	require.NoError(t, trace.WriteFile(path, tr))
	code, stdout, stderr := runCLI("inspect", "--format", "json", path)
	require.Equal(t, 0, code, stderr)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	var labels []string
	for _, m := range in["markers"].([]any) {
		labels = append(labels, m.(map[string]any)["label"].(string))
	}
	assert.Equal(t, []string{"fwd", "step 1", "late"}, labels)
}

// TestInspectNativeMarkerFirstEvent: a streamed trace's markers are
// listed at the index of their first event, as a snapshot's are; they
// were all "first at event 0" when the streamed count passed no index.
func TestInspectNativeMarkerFirstEvent(t *testing.T) {
	file := "../../traces/trial/bert-base_b16_s128_fp16.mrt"
	o, err := trace.Open(file)
	require.NoError(t, err)
	want := map[string]float64{}
	var e trace.Event
	for i := 0; ; i++ {
		err := o.Reader.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if _, seen := want[e.Label]; e.Action == trace.ActionMarker && !seen {
			want[e.Label] = float64(i)
		}
	}
	require.NoError(t, o.Close())
	require.Len(t, want, 4)

	code, stdout, stderr := runCLI("inspect", "--format", "json", file)
	require.Equal(t, 0, code, stderr)
	var in struct {
		Markers []struct {
			Label      string  `json:"label"`
			FirstEvent float64 `json:"first_event"`
		} `json:"markers"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	got := map[string]float64{}
	for _, m := range in.Markers {
		got[m.Label] = m.FirstEvent
	}
	require.Equal(t, want, got)
	require.Greater(t, got["step 2"], got["step 1"])
}

// A converted native trace keeps its annotations before its events, so a
// replay that stops at an OOM lists those up to the stop, as the same
// trace's snapshot does (written after the events, they were never read,
// and none were listed).
func TestReplayStoppedNativeListsAnnotations(t *testing.T) {
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay-test"}, Stacks: trace.NewStacks(), Events: []trace.Event{
		{Action: trace.ActionAlloc, Addr: 1 << 30, Size: 1 << 20, TimeUS: 1},
		{Action: trace.ActionAlloc, Addr: 2 << 30, Size: 1 << 30, TimeUS: 3},
		{Action: trace.ActionFreeRequested, Addr: 1 << 30, Size: 1 << 20, TimeUS: 5},
		{Action: trace.ActionAlloc, Addr: 3 << 30, Size: 1 << 20, TimeUS: 7},
	}, Annotations: []trace.Annotation{
		{Device: 0, TimeUS: 2, Name: "fwd", Stage: "START", Event: 1},
		{Device: 0, TimeUS: 4, Name: "fwd", Stage: "END", Event: 2},
		{Device: 0, TimeUS: 6, Name: "opt", Stage: "START", Event: 3},
	}}
	type markers struct {
		Stopped bool `json:"stopped"`
		Markers []struct {
			Event int64  `json:"event"`
			Label string `json:"label"`
			Stage string `json:"stage"`
		} `json:"markers"`
	}
	replayed := func(path string) markers {
		_, stdout, stderr := runCLI("replay", "--progress=false", "--capacity", "512MiB", "--format", "json", path)
		var out markers
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stderr)
		require.True(t, out.Stopped, stdout)
		return out
	}
	dir := t.TempDir()
	native, pickle := filepath.Join(dir, "a.mrt"), filepath.Join(dir, "a.pickle")
	require.NoError(t, trace.WriteFile(native, tr))
	require.NoError(t, trace.WritePyTorchFile(pickle, tr))
	fromPickle := replayed(pickle)
	require.NotEmpty(t, fromPickle.Markers)
	require.Less(t, len(fromPickle.Markers), 3, "none past the stop")
	assert.Equal(t, fromPickle, replayed(native))
}

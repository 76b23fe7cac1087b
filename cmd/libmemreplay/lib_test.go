package main

// The library as PyTorch uses it: libmemreplay.so, built with
// -buildmode=c-shared, loaded by a separate C (or C++) process with
// dlopen and called through function pointers of PyTorch's types
// (testdata/harness.c), on the fake CUDA driver.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const mib = 1 << 20

// stats parses a "stats DEV {json}" line.
func (r *run) stats(n int) map[string]int64 {
	r.t.Helper()
	line := r.nth("stats", n)
	_, js, ok := strings.Cut(line, " ")
	require.True(r.t, ok, line)
	require.False(r.t, strings.HasPrefix(js, "NULL"), "stats failed: %s", line)
	var m map[string]int64
	require.NoError(r.t, json.Unmarshal([]byte(js), &m), js)
	return m
}

// ptr parses a "malloc NAME 0x..." line; 0 for NULL.
func (r *run) ptr(name string) uint64 {
	r.t.Helper()
	for _, l := range r.lines {
		rest, ok := strings.CutPrefix(l, "malloc "+name+" ")
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, "NULL") {
			return 0
		}
		p, err := strconv.ParseUint(strings.TrimPrefix(rest, "0x"), 16, 64)
		require.NoError(r.t, err, l)
		return p
	}
	r.t.Fatalf("no malloc of %s in:\n%s", name, strings.Join(r.lines, "\n"))
	return 0
}

// Malloc and free through PyTorch's function types: the pointers are
// usable memory, a freed block is reused for the same size (the cache),
// the statistics are PyTorch's keys with the values its allocator would
// report, and empty_cache returns what is fully free.
func TestMallocFreeCacheStats(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30), `
init 1
malloc z 0 0 0
lasterr
malloc a 1000 0 0
touch a
free a
malloc b 1000 0 0
touch b
malloc c 3145728 0 0
touch c
stats 0
free c
stats 0
empty
stats 0
free b
empty
stats 0
lasterr
`)
	require.Zero(t, r.ptr("z"), "a size of 0 gives NULL")
	require.Equal(t, "", r.nth("lasterr", 0), "a size of 0 is not an error")
	a, b, c := r.ptr("a"), r.ptr("b"), r.ptr("c")
	require.NotZero(t, a)
	require.Equal(t, a, b, "the second malloc of the same size reuses the cached block")
	require.NotZero(t, c)
	require.Equal(t, "ok", r.get("touch a"))
	require.Equal(t, "ok", r.get("touch b"))
	require.Equal(t, "ok", r.get("touch c"))

	s := r.stats(0)
	require.Equal(t, int64(1024+3*mib), s["allocated_bytes.all.current"])
	require.Equal(t, int64(1000+3*mib), s["requested_bytes.all.current"])
	require.Equal(t, int64(2*mib+20*mib), s["reserved_bytes.all.current"], "a 2 MiB small segment and a 20 MiB large one")
	require.Equal(t, int64(2), s["segment.all.current"])
	require.Equal(t, int64(2), s["num_device_alloc"])
	require.Equal(t, int64(3), s["allocation.all.allocated"])
	require.Equal(t, int64(1), s["allocation.all.freed"])
	require.Equal(t, int64(-1), s["max_split_size"])
	var zero allocator.Stats
	require.Len(t, s, len(zero.Map()), "every key of allocator.Stats.Map")

	s = r.stats(1) // c freed: cached, still reserved
	require.Equal(t, int64(1024), s["allocated_bytes.all.current"])
	require.Equal(t, int64(22*mib), s["reserved_bytes.all.current"])

	s = r.stats(2) // empty_cache: the large segment goes, the small one holds b
	require.Equal(t, int64(1024), s["allocated_bytes.all.current"])
	require.Equal(t, int64(2*mib), s["reserved_bytes.all.current"])
	require.Equal(t, int64(1), s["num_device_free"])

	s = r.stats(3)
	require.Zero(t, s["reserved_bytes.all.current"])
	require.Zero(t, s["allocated_bytes.all.current"])
	require.Equal(t, int64(22*mib), s["reserved_bytes.all.peak"])
	require.Equal(t, "", r.nth("lasterr", 1))
	require.Empty(t, r.stderr)
}

// Out of memory: NULL (MEMREPLAY_OOM=null, or a C host) with PyTorch's
// message in last_error and on stderr, counted in num_ooms, and the
// library keeps serving.
func TestOutOfMemory(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 64*mib, "MEMREPLAY_OOM=null"), `
malloc a 41943040 0 0
malloc big 104857600 0 0
lasterr
malloc after 1048576 0 0
touch after
stats 0
`)
	require.NotZero(t, r.ptr("a"))
	require.Zero(t, r.ptr("big"))
	msg := r.get("lasterr")
	require.Contains(t, msg, "CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total capacity of 64.00 MiB of which 24.00 MiB is free.")
	require.Contains(t, r.get("malloc big"), "CUDA out of memory. Tried to allocate 100.00 MiB")
	require.Contains(t, r.stderr, "memreplay: CUDA out of memory. Tried to allocate 100.00 MiB")
	require.NotZero(t, r.ptr("after"))
	require.Equal(t, "ok", r.get("touch after"))
	s := r.stats(0)
	require.Equal(t, int64(1), s["num_ooms"])
	require.Equal(t, int64(1), s["num_alloc_retries"])
}

// A free of a pointer the library did not hand out, and a double free,
// are reported (last_error, stderr) and change nothing; record_stream of
// an unknown pointer too.
func TestBadFrees(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30), `
malloc a 4096 0 0
freeaddr 0x1234
lasterr
free a
free a
lasterr
record nosuch 7
lasterr
malloc b 4096 0 0
stats 0
`)
	a := r.ptr("a")
	require.Equal(t, "free of 0x1234: not a pointer memreplay_malloc returned, or already freed", r.nth("lasterr", 0))
	require.Equal(t, fmt.Sprintf("free of %#x: not a pointer memreplay_malloc returned, or already freed", a), r.nth("lasterr", 1))
	require.Contains(t, r.nth("lasterr", 2), "record_stream of 0x0: not a live pointer")
	require.Equal(t, a, r.ptr("b"))
	s := r.stats(0)
	require.Equal(t, int64(1), s["allocation.all.current"])
	require.Equal(t, int64(1), s["allocation.all.freed"])
	require.Equal(t, 3, strings.Count(r.stderr, "memreplay: "), r.stderr)
}

// record_stream: a block used on another stream is not reused until that
// stream's work is done (here: until the fake driver completes the event
// the free recorded on it).
func TestRecordStream(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30), `
malloc a 1048576 0 0
record a 7
free a
malloc b 1048576 0 0
stats 0
complete 7
free b
malloc c 1048576 0 0
stats 0
lasterr
`)
	a, b, c := r.ptr("a"), r.ptr("b"), r.ptr("c")
	require.NotEqual(t, a, b, "a waits for stream 7")
	require.Equal(t, "", r.get("lasterr"))
	s := r.stats(0)
	require.Equal(t, int64(2), s["active.all.current"], "b, and a pending its event")
	require.Equal(t, int64(1), s["allocation.all.current"])
	require.Equal(t, a, c, "after the event completed, a's block is the lowest free one")
	s = r.stats(1)
	require.Equal(t, int64(1), s["active.all.current"])
}

// The settings come from MEMREPLAY_ALLOC_CONF, else from PyTorch's
// variables; a bad string is reported once, and every malloc then fails
// with it.
func TestSettings(t *testing.T) {
	t.Run("pytorch fallback", func(t *testing.T) {
		r := runHarness(t, harnessEnv(t, 1<<30, "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:40"), "malloc a 4096 0 0\nstats 0")
		require.Equal(t, int64(40*mib), r.stats(0)["max_split_size"])
	})
	t.Run("memreplay first", func(t *testing.T) {
		r := runHarness(t, harnessEnv(t, 1<<30, "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:40",
			"MEMREPLAY_ALLOC_CONF=max_split_size_mb:100"), "malloc a 4096 0 0\nstats 0")
		require.Equal(t, int64(100*mib), r.stats(0)["max_split_size"])
	})
	t.Run("expandable segments", func(t *testing.T) {
		r := runHarness(t, harnessEnv(t, 1<<30, "MEMREPLAY_ALLOC_CONF=expandable_segments:True"), `
malloc a 31457280 0 0
touch a
malloc b 31457280 0 0
touch b
stats 0
free a
free b
empty
stats 0
`)
		a, b := r.ptr("a"), r.ptr("b")
		require.Equal(t, a+30*mib, b, "one growing segment: b right after a")
		s := r.stats(0)
		require.Equal(t, int64(60*mib), s["reserved_bytes.all.current"], "pages of 20 MiB mapped as needed")
		require.Zero(t, r.stats(1)["reserved_bytes.all.current"])
	})
	t.Run("bad string", func(t *testing.T) {
		r := runHarness(t, harnessEnv(t, 1<<30, "MEMREPLAY_ALLOC_CONF=expandable_segments:Maybe", "MEMREPLAY_OOM=null"), `
init 1
malloc a 4096 0 0
lasterr
malloc b 4096 0 0
stats 0
`)
		want := `MEMREPLAY_ALLOC_CONF: alloc conf "expandable_segments:Maybe" at offset 20: expandable_segments: Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'Maybe'`
		require.Zero(t, r.ptr("a"))
		require.Zero(t, r.ptr("b"))
		require.Equal(t, want, r.get("lasterr"))
		require.Equal(t, want, r.get("malloc a NULL"))
		require.Equal(t, "memreplay: "+want+"\n", r.stderr, "reported once")
		require.Contains(t, r.get("stats 0"), "NULL "+want)
	})
}

// No driver: every call fails with the loader's message, reported once.
func TestNoDriver(t *testing.T) {
	env := harnessEnv(t, 1<<30, "MEMREPLAY_OOM=null")
	for i, kv := range env {
		if strings.HasPrefix(kv, "MEMREPLAY_LIBCUDA=") {
			env[i] = "MEMREPLAY_LIBCUDA=" + filepath.Join(t.TempDir(), "libnosuch.so")
		}
	}
	r := runHarness(t, env, "malloc a 4096 0 0\nmalloc b 4096 0 0\nlasterr\nstats 0\nempty")
	require.Zero(t, r.ptr("a"))
	require.Contains(t, r.get("lasterr"), "device 0: cuda: cannot load the CUDA driver")
	require.Equal(t, 1, strings.Count(r.stderr, "cannot load the CUDA driver"), r.stderr)
}

// Many threads at once: every block stays private to its thread (each
// thread writes a pattern over its blocks and checks it at the free),
// with empty_cache, stats and record_stream running concurrently, and the
// statistics add up at the end.
func TestThreads(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 2<<30), "threads 8 6000\nstats 0\nlasterr")
	res := r.get("threads")
	require.True(t, strings.HasPrefix(res, "ok "), res)
	n, err := strconv.Atoi(strings.TrimPrefix(res, "ok "))
	require.NoError(t, err)
	s := r.stats(0)
	require.Zero(t, s["allocation.all.current"])
	require.Zero(t, s["allocated_bytes.all.current"])
	require.Equal(t, int64(n), s["allocation.all.allocated"])
	require.Zero(t, s["num_ooms"])
	require.Equal(t, "", r.get("lasterr"))
}

// A failed malloc in a C++ host throws std::runtime_error through
// PyTorch's std::function, with PyTorch's message (what PyTorch's Python
// bindings turn into a RuntimeError), and the library serves the next
// call; MEMREPLAY_OOM=null returns NULL instead. Two hosts: a C++ program,
// and a C program that loads the C++ code with RTLD_LOCAL as CPython loads
// torch, where the C++ runtime is not in the global scope (on a real GPU
// the library returned NULL there, and PyTorch made a tensor of it).
func TestThrowInCxxHost(t *testing.T) {
	lib := needShared(t)
	hosts := map[string][]string{"C++ program": {needHarnessCxx(t)}, "C program loading C++ locally": needPyHost(t)}
	for name, host := range hosts {
		t.Run(name, func(t *testing.T) {
			cxx := func(env []string, size string) []string {
				cmd := exec.Command(host[0], append(host[1:], lib, size)...)
				cmd.Env = env
				out, err := cmd.Output()
				require.NoError(t, err, "%s", out)
				return strings.Split(strings.TrimSpace(string(out)), "\n")
			}
			out := cxx(harnessEnv(t, 64*mib), "1000")
			require.Len(t, out, 3, out)
			require.True(t, strings.HasPrefix(out[0], "ok 0x"), out[0])
			require.Equal(t, "freed", out[1])

			out = cxx(harnessEnv(t, 64*mib), fmt.Sprint(100*mib))
			require.Len(t, out, 2, out)
			require.True(t, strings.HasPrefix(out[0], "threw CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total capacity of 64.00 MiB"), out[0])
			require.True(t, strings.HasPrefix(out[1], "after 0x"), out[1])

			out = cxx(harnessEnv(t, 64*mib, "MEMREPLAY_OOM=null"), fmt.Sprint(100*mib))
			require.Equal(t, "null", out[0])
			require.True(t, strings.HasPrefix(out[1], "after 0x"), out[1])

			// Any malloc failure throws, named as memreplay's.
			out = cxx(harnessEnv(t, 64*mib, "MEMREPLAY_ALLOC_CONF=bogus:1"), "1000")
			require.True(t, strings.HasPrefix(out[0], "threw memreplay: MEMREPLAY_ALLOC_CONF: "), out[0])
		})
	}
}

// workload is a script with a little of everything: caching, splitting,
// both pools, two streams, record_stream, empty_cache, an OOM, and
// threads.
const workload = `
init 1
malloc a 1000 0 0
malloc b 3000000 0 0
malloc c 12000000 0 0
malloc d 700 0 5
free a
malloc e 1000 0 0
record b 9
free b
malloc f 3000000 0 0
free c
malloc g 6000000 0 0
empty
malloc huge 900000000 0 0
complete 9
malloc h 3000000 0 0
free d
free e
free f
free g
threads 4 1500
malloc i 50000000 0 0
fraction 0.5 0
`

// With MEMREPLAY_TRACE set, the library records, and write_trace writes a
// native trace that memreplay's replay reproduces decision for decision
// (the final layout included), under several settings;
// write_snapshot writes a PyTorch snapshot pickle with the same events and
// segments.
func TestTraceReplaysExactly(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True", "max_split_size_mb:20,garbage_collection_threshold:0.5",
		"roundup_power2_divisions:4"} {
		t.Run(conf, func(t *testing.T) {
			dir := t.TempDir()
			tracePath, snapPath := filepath.Join(dir, "run.mrt"), filepath.Join(dir, "run.pickle")
			r := runHarness(t, harnessEnv(t, 512*mib, "MEMREPLAY_TRACE="+tracePath, "MEMREPLAY_OOM=null",
				"MEMREPLAY_QUIET=1", "MEMREPLAY_ALLOC_CONF="+conf),
				workload+"stats 0\ntrace -\nsnapshot "+snapPath+"\nlasterr")
			require.Equal(t, "0", r.get("trace"), r.get("lasterr"))
			require.Equal(t, "0", r.get("snapshot"), r.get("lasterr"))
			require.True(t, strings.HasPrefix(r.get("threads"), "ok "), r.get("threads"))
			require.Zero(t, r.ptr("huge"), "the OOM")
			stats := r.stats(0)

			o, err := trace.Open(tracePath)
			require.NoError(t, err)
			defer o.Close()
			require.Equal(t, trace.FormatNative, o.Format)
			h := o.Reader.Header()
			require.Equal(t, "libmemreplay", h.Source)
			require.Len(t, h.Devices, 1)
			require.Equal(t, uint64(512*mib), h.Devices[0].Capacity)
			require.NotEmpty(t, h.Devices[0].Name)
			cfg, err := config.FromAllocatorSettings(h.AllocatorSettings)
			require.NoError(t, err)
			require.Equal(t, conf, cfg.Source)
			require.NotEmpty(t, h.Notes, "the set_memory_fraction call is noted")

			res, err := replay.Run(o.Reader, replay.Options{Check: true, InvariantChecks: true})
			require.NoError(t, err)
			c := res.Check
			requireNoDivergence(t, c, func(path string) error {
				b, err := os.ReadFile(tracePath)
				if err != nil {
					return err
				}
				return os.WriteFile(path, b, 0o644)
			})
			require.Equal(t, c.DecisionsExpected, c.DecisionsMatched)
			require.Greater(t, c.DecisionsExpected, int64(1000))
			require.NotNil(t, c.FinalSegmentsMatch)
			require.True(t, *c.FinalSegmentsMatch, c.FinalDifference)
			require.True(t, c.Passed())
			got := res.Devices[0].Stats
			require.Equal(t, stats["num_ooms"], got.NumOOMs)
			require.Equal(t, stats["num_alloc_retries"], got.NumAllocRetries)
			require.Equal(t, stats["reserved_bytes.all.peak"], got.ReservedBytes[0].Peak)
			require.Equal(t, stats["allocated_bytes.all.peak"], got.AllocatedBytes[0].Peak)

			// The snapshot: the same segments, and the same PyTorch
			// entries (memreplay's own inputs have no place in it).
			nt, err := trace.ReadAll(mustOpen(t, tracePath).Reader)
			require.NoError(t, err)
			pt, err := trace.ReadPyTorchFile(snapPath)
			require.NoError(t, err)
			require.Equal(t, len(nt.Final), len(pt.Final))
			for i := range nt.Final {
				require.Equal(t, nt.Final[i].Address, pt.Final[i].Address)
				require.Equal(t, nt.Final[i].TotalSize, pt.Final[i].TotalSize)
				require.Equal(t, nt.Final[i].Expandable, pt.Final[i].Expandable)
				require.Equal(t, len(nt.Final[i].Blocks), len(pt.Final[i].Blocks))
			}
			var want []trace.Event
			for _, e := range nt.Events {
				if e.Action <= trace.ActionOOM || (e.Action == trace.ActionMarker) {
					want = append(want, e)
				}
			}
			require.Equal(t, len(want), len(pt.Events))
			for i := range want {
				require.Equal(t, want[i].Action, pt.Events[i].Action, "event %d", i)
				require.Equal(t, want[i].Addr, pt.Events[i].Addr, "event %d", i)
				require.Equal(t, want[i].Size, pt.Events[i].Size, "event %d", i)
			}
		})
	}
}

func mustOpen(t *testing.T, path string) *trace.Opened {
	t.Helper()
	o, err := trace.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

// Without recording, write_trace fails with a message saying how to turn
// it on, and write_snapshot still writes the segments.
func TestWriteWithoutRecording(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.pickle")
	r := runHarness(t, harnessEnv(t, 1<<30), fmt.Sprintf("malloc a 5000000 0 0\ntrace %s\nlasterr\nsnapshot %s\ntrace -\nlasterr",
		filepath.Join(dir, "t.mrt"), snap))
	require.Equal(t, "1", r.nth("trace", 0))
	require.Contains(t, r.nth("lasterr", 0), "not recording: set MEMREPLAY_TRACE=PATH or MEMREPLAY_RECORD=1")
	require.Equal(t, "0", r.get("snapshot"))
	require.Equal(t, "1", r.nth("trace", 1))
	require.Contains(t, r.nth("lasterr", 1), "no path given and MEMREPLAY_TRACE is not set")
	pt, err := trace.ReadPyTorchFile(snap)
	require.NoError(t, err)
	require.Len(t, pt.Final, 1)
	require.Equal(t, uint64(20*mib), pt.Final[0].TotalSize)
	require.Empty(t, pt.Events)
	_, err = os.Stat(filepath.Join(dir, "t.mrt"))
	require.True(t, os.IsNotExist(err))
}

// python/memreplay_torch.py, with a stand-in for torch (testdata/faketorch:
// no PyTorch here): use_memreplay loads the library with the settings
// given, hands PyTorch the allocator and the four hooks, and stats,
// last_error, write_trace and write_snapshot work; the trace replays.
func TestPythonHelper(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	lib := needShared(t)
	dir := t.TempDir()
	tracePath, snapPath := filepath.Join(dir, "py.mrt"), filepath.Join(dir, "py.pickle")
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	cmd := exec.Command(py, "testdata/python_helper.py", repo, lib, tracePath, snapPath)
	cmd.Env = harnessEnv(t, 1<<30, "PYTHONDONTWRITEBYTECODE=1", "MEMREPLAY_QUIET=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, []string{
		"hooks init,memory_fraction,record_stream,reset",
		"contiguous True",
		"written True",
		fmt.Sprintf("stats 2 0 %d", 60*mib),
		"last_error free of 0x3039: not a pointer memreplay_malloc returned, or already freed",
		"error memreplay_write_trace",
		"done",
	}, got)
	res, err := replay.Run(mustOpen(t, tracePath).Reader, replay.Options{Check: true})
	require.NoError(t, err)
	require.True(t, res.Check.Passed(), "%+v", res.Check)
	require.Equal(t, int64(2), res.Devices[0].Stats.Allocation[0].Allocated)
	pt, err := trace.ReadPyTorchFile(snapPath)
	require.NoError(t, err)
	require.NotEmpty(t, pt.Events)
}

package replay_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/trace"
)

func statsOf(st allocator.Stats) *replay.MemoryStats {
	return &replay.MemoryStats{File: "stats.json", Device: -1, Values: st.Map()}
}

// A memreplay trace records empty_cache, stream syncs and record_stream, so
// every statistic is determined: the replay ends with the recording
// allocator's memory_stats() to the last key, under every setting.
func TestMemoryStatsOfRecordings(t *testing.T) {
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= seeds(); seed++ {
			t.Run(fmt.Sprintf("%s/%d", conf, seed), func(t *testing.T) {
				tr, cfg, stats := recordWorkload(t, conf, 600*mib, seed, steps())
				want := statsOf(stats)
				res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, ExpectStats: want})
				require.NoError(t, err)
				c := res.StatsCheck
				require.NotNil(t, c)
				require.Empty(t, c.Differences)
				require.Empty(t, c.NotCompared)
				require.Equal(t, len(want.Values), c.Exact)
				require.Equal(t, c.Exact, c.ExactMatched)
				require.Zero(t, c.Inferred)
				require.True(t, c.Passed())
				require.Equal(t, int32(0), c.Device)
			})
		}
	}
}

// Stripped to what PyTorch records, the same workloads leave some
// statistics to inference. Whenever the replay made every decision as
// recorded, the exact keys all match; the inferred ones (retries, syncs,
// transient inactive splits) may not, and on this harsh workload (frequent
// empty_cache, a fifth of the frees on other streams) some do, which is
// why they are classed apart.
func TestMemoryStatsOfPyTorchLikeTraces(t *testing.T) {
	runs, passed, inferredDiffs := 0, 0, map[string]int{}
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= 2*seeds(); seed++ {
			tr, cfg, stats := recordWorkload(t, conf, 600*mib, seed, steps())
			res, err := replay.RunTrace(asPyTorch(tr), replay.Options{Config: &cfg, Check: true, ExpectStats: statsOf(stats)})
			require.NoError(t, err)
			runs++
			if !res.Check.Passed() {
				continue
			}
			passed++
			c := res.StatsCheck
			for _, d := range c.Differences {
				require.False(t, d.Exact, "%s/%d: exact key %s: recorded %d, replayed %d", conf, seed, d.Key, d.Recorded, d.Replayed)
				require.NotEmpty(t, d.Why)
				inferredDiffs[d.Key]++
			}
			require.True(t, c.Passed(), "%s/%d", conf, seed)
			require.Positive(t, c.Inferred)
		}
	}
	require.Greater(t, passed, runs/2, "most runs reproduce every decision")
	require.NotEmpty(t, inferredDiffs, "no inferred key ever differed: the classification would be unneeded")
	t.Logf("%d of %d runs with every decision matched; inferred keys that differed: %v", passed, runs, inferredDiffs)
}

// A statistic the trace determines that differs fails the check and is
// named; an inferred one is reported without failing it.
func TestMemoryStatsDifferences(t *testing.T) {
	tr, cfg, stats := recordWorkload(t, "", 600*mib, 3, steps())
	want := statsOf(stats)
	want.Values["allocated_bytes.all.peak"] += 512
	want.Values["num_alloc_retries"] += 2
	want.Values["a_key_from_a_newer_pytorch"] = 7
	res, err := replay.RunTrace(asPyTorch(tr), replay.Options{Config: &cfg, ExpectStats: want})
	require.NoError(t, err)
	c := res.StatsCheck
	require.False(t, c.Passed())
	require.Equal(t, c.Exact-1, c.ExactMatched)
	byKey := map[string]replay.StatDifference{}
	for _, d := range c.Differences {
		byKey[d.Key] = d
	}
	peak := byKey["allocated_bytes.all.peak"]
	require.True(t, peak.Exact)
	require.Equal(t, stats.AllocatedBytes[allocator.StatAll].Peak+512, peak.Recorded)
	require.Equal(t, stats.AllocatedBytes[allocator.StatAll].Peak, peak.Replayed)
	retries := byKey["num_alloc_retries"]
	require.False(t, retries.Exact)
	require.Contains(t, retries.Why, "empty_cache")
	require.Equal(t, []replay.StatSkip{{Key: "a_key_from_a_newer_pytorch", Why: "not kept by memreplay"}}, c.NotCompared)

	// The same change to an inferred key alone passes.
	want = statsOf(stats)
	want.Values["num_alloc_retries"] += 2
	res, err = replay.RunTrace(asPyTorch(tr), replay.Options{Config: &cfg, ExpectStats: want})
	require.NoError(t, err)
	require.True(t, res.StatsCheck.Passed())
	require.Equal(t, len(c.Differences)-1, len(res.StatsCheck.Differences))
	for _, d := range res.StatsCheck.Differences {
		require.False(t, d.Exact, d.Key)
	}
}

// A trace that starts after the process had allocated (cut here after its
// first third, as a ring buffer that overflowed leaves it) determines the
// current values only: those match the recording allocator's exactly after
// the reconstruction, the peaks are compared as inferred, and the counts
// since the process started are left out.
func TestMemoryStatsOfPartialTrace(t *testing.T) {
	tr, cfg, stats := recordWorkload(t, "", 600*mib, 5, steps())
	require.True(t, tr.HasFinal)
	cut := *tr
	cut.Header.Source = replay.SourcePyTorch
	cut.Events = nil
	for _, e := range tr.Events[len(tr.Events)/3:] {
		switch e.Action {
		case trace.ActionRecordStream, trace.ActionStreamSync, trace.ActionEmptyCache:
			continue
		}
		cut.Events = append(cut.Events, e)
	}
	want := statsOf(stats)
	res, err := replay.RunTrace(&cut, replay.Options{Config: &cfg, ExpectStats: want})
	require.NoError(t, err)
	require.NotNil(t, res.Reconstructed)
	c := res.StatsCheck
	for _, d := range c.Differences {
		require.False(t, d.Exact, "exact key %s: recorded %d, replayed %d", d.Key, d.Recorded, d.Replayed)
	}
	require.True(t, c.Passed())
	current := 0
	for k := range want.Values {
		if strings.HasSuffix(k, ".current") {
			current++
		}
	}
	require.Equal(t, current+1, c.Exact, "the current values and max_split_size")
	for _, s := range c.NotCompared {
		require.False(t, strings.HasSuffix(s.Key, ".current") || strings.HasSuffix(s.Key, ".peak"), s.Key)
		require.Contains(t, s.Why, "since the process started")
	}
	require.Equal(t, len(want.Values), c.Exact+c.Inferred+len(c.NotCompared))
}

// memory_stats() is per device: a trace of two devices needs the device
// named, and a device the trace does not use is an error naming the file.
func TestMemoryStatsDevice(t *testing.T) {
	tr, stats := replaytest.RecordTwoDevices(t)
	ms := statsOf(stats[1])
	_, err := replay.RunTrace(tr, replay.Options{ExpectStats: ms})
	var fe *trace.FormatError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Contains(t, err.Error(), "stats.json")
	require.Contains(t, err.Error(), "devices 0, 1: name the device")

	ms.Device = 1
	res, err := replay.RunTrace(tr, replay.Options{ExpectStats: ms})
	require.NoError(t, err)
	require.True(t, res.StatsCheck.Passed())
	require.Equal(t, int32(1), res.StatsCheck.Device)

	// Device 0's statistics are not device 1's.
	ms.Device = 0
	res, err = replay.RunTrace(tr, replay.Options{ExpectStats: ms})
	require.NoError(t, err)
	require.False(t, res.StatsCheck.Passed())

	ms.Device = 4
	_, err = replay.RunTrace(tr, replay.Options{ExpectStats: ms})
	require.ErrorContains(t, err, "memory_stats of device 4, which the trace")
}

func TestReadMemoryStats(t *testing.T) {
	read := func(s string) (*replay.MemoryStats, error) {
		return replay.ReadMemoryStats(strings.NewReader(s), "x.stats.json")
	}
	ms, err := read(`{"allocated_bytes.all.peak": 1024, "num_alloc_retries": 0, "max_split_size": -1, "reserved_bytes.all.current": 2e6}`)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"allocated_bytes.all.peak": 1024, "num_alloc_retries": 0, "max_split_size": -1,
		"reserved_bytes.all.current": 2000000}, ms.Values)
	require.Equal(t, int32(-1), ms.Device)

	// json.dump's file ends in a newline when written with print().
	ms, err = read("{\"num_ooms\": 1}\n\n")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"num_ooms": 1}, ms.Values)

	// memory_stats_as_nested_dict(), flattened as memory_stats() does.
	ms, err = read(`{"allocated_bytes": {"all": {"peak": 5, "current": 1}}, "num_ooms": 2}`)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"allocated_bytes.all.peak": 5, "allocated_bytes.all.current": 1, "num_ooms": 2}, ms.Values)

	for _, tc := range []struct{ in, want string }{
		{``, "x.stats.json: byte offset 0: memory_stats: empty file"},
		{`{"a": 1,}`, "x.stats.json: byte offset 8: memory_stats: invalid character '}'"},
		{`[1, 2]`, "x.stats.json: byte offset 1: memory_stats: want a JSON object"},
		{`null`, "want a JSON object of statistics, got null"},
		{`{}`, "no statistics in the object"},
		{`{"a": 1} {"b": 2}`, "x.stats.json: byte offset 9: memory_stats: data after the JSON object"},
		{`{"num_ooms": "2"}`, `"num_ooms": want an integer, got a string`},
		{`{"num_ooms": 1.5}`, `"num_ooms": want an integer, got 1.5`},
		{`{"num_ooms": 1e30}`, `"num_ooms": want an integer, got 1e30`},
		{`{"a": {"b": [1]}}`, `"a.b": want an integer, got an array`},
	} {
		_, err := read(tc.in)
		var fe *trace.FormatError
		require.True(t, errors.As(err, &fe), "%q: %v", tc.in, err)
		require.Contains(t, err.Error(), tc.want, "%q", tc.in)
		require.True(t, strings.HasPrefix(err.Error(), "x.stats.json: "), err.Error())
	}
}

func FuzzMemoryStats(f *testing.F) {
	for _, s := range []string{`{"a.b.c": 1}`, `{"a": {"b": 2}}`, `{"x": 1e3}`, `[]`, `{"x": "y"}`, `{"x": 1}{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := replay.ReadMemoryStats(strings.NewReader(string(data)), "f.json")
		if err != nil {
			var fe *trace.FormatError
			require.True(t, errors.As(err, &fe), "%v", err)
			return
		}
		require.NotEmpty(t, ms.Values)
	})
}

// recordedWithStats lists the traces in traces/ that have PyTorch's own
// memory_stats() beside them (NAME.stats.json next to NAME.pickle, as
// bench/gpu_record_trials.py writes them on a GPU machine).
func recordedWithStats(t *testing.T) [][2]string {
	t.Helper()
	var pairs [][2]string
	err := filepath.WalkDir("../../traces", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".stats.json") {
			return err
		}
		base := strings.TrimSuffix(p, ".stats.json")
		for _, ext := range []string{".pickle", ".mrt"} {
			if _, err := os.Stat(base + ext); err == nil {
				pairs = append(pairs, [2]string{base + ext, p})
				return nil
			}
		}
		t.Errorf("%s: no trace beside it (%s.pickle or .mrt)", p, base)
		return nil
	})
	require.NoError(t, err)
	return pairs
}

// Every trace committed with its recording process's memory_stats() is
// replayed with the trace's own settings, and must end with the statistics
// PyTorch counted (the keys the trace determines; memstats.go): the ones
// in traces/recorded, recorded on an H200 by bench/gpu_record_trials.py
// and bench/gpu-pytorch.sh (docs/cuda.md, the checklist).
func TestRecordedTracesPredictMemoryStats(t *testing.T) {
	pairs := recordedWithStats(t)
	if len(pairs) == 0 {
		t.Skip("no trace with its memory_stats() in traces/ yet: bench/gpu_record_trials.py records them on a GPU")
	}
	for _, p := range pairs {
		t.Run(filepath.Base(p[0]), func(t *testing.T) {
			o, err := trace.Open(p[0])
			require.NoError(t, err)
			defer o.Close()
			_, err = replay.PrepareOpened(o)
			require.NoError(t, err)
			f, err := os.Open(p[1])
			require.NoError(t, err)
			defer f.Close()
			ms, err := replay.ReadMemoryStats(f, p[1])
			require.NoError(t, err)
			res, err := replay.Run(o.Reader, replay.Options{Name: p[0], Check: true, ExpectStats: ms})
			require.NoError(t, err)
			c := res.StatsCheck
			require.True(t, c.Passed(), "%d of %d exact keys match; differences: %+v", c.ExactMatched, c.Exact, c.Differences)
			t.Logf("%d of %d exact keys, %d of %d inferred keys match; %d not compared; decisions %d of %d",
				c.ExactMatched, c.Exact, c.InferredMatched, c.Inferred, len(c.NotCompared),
				res.Check.DecisionsMatched, res.Check.DecisionsExpected)
		})
	}
}

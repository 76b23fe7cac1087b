package main

// The library's Go side in this process (the functions the exports wrap),
// on the fake driver loaded here: under `go test -race` these are the
// tests that check its locking.

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/internal/fakecuda"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// newTestLib builds a library on the in-process fake driver with the
// settings conf; edit adjusts the options. Its devices are closed (and
// the fake's memory released) at the end of the test.
func newTestLib(t testing.TB, conf string, edit func(*options)) (*library, *bytes.Buffer) {
	t.Helper()
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	var stderr bytes.Buffer
	o := options{cfg: cfg, maxEntries: defaultMaxEntries, oomThrow: true, stderr: &stderr, open: openFake(t)}
	if edit != nil {
		edit(&o)
	}
	l := newLibrary(o)
	t.Cleanup(l.close)
	return l, &stderr
}

// requireNoDivergence holds a replay check to no divergence. When there
// is one, the recording is kept first, where it outlives the test (write
// writes it to the path given, in the system's temporary directory), and
// its path logged: a divergence seen once in a few hundred runs under load
// is then there to study (memreplay replay --check FILE).
func requireNoDivergence(t *testing.T, c *replay.CheckResult, write func(path string) error) {
	t.Helper()
	if c.FirstDivergence != nil {
		f, err := os.CreateTemp("", "memreplay-"+strings.NewReplacer("/", "_", ":", "_").Replace(t.Name())+"-*.mrt")
		if err == nil {
			f.Close()
			err = write(f.Name())
		}
		if err != nil {
			t.Logf("keeping the recording: %v", err)
		} else {
			t.Logf("the recording that diverged: %s", f.Name())
		}
	}
	require.Nil(t, c.FirstDivergence, "first divergence: %v", c.FirstDivergence)
}

// Concurrent callers on two devices with the recording on: empty_cache,
// record_stream and stats race with malloc and free, and the recording
// still replays decision for decision.
func TestConcurrentRecording(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			l, stderr := newTestLib(t, conf, func(o *options) { o.record = true })
			iters := testConcurrentBody(t, l)
			require.Empty(t, stderr.String())

			tr, err := l.buildTrace(true)
			require.NoError(t, err)
			require.Len(t, tr.Header.Devices, 2)
			res, err := replay.Run(tr.NewReader(), replay.Options{Check: true})
			require.NoError(t, err)
			c := res.Check
			requireNoDivergence(t, c, func(path string) error { return trace.WriteFile(path, tr) })
			require.Equal(t, c.DecisionsExpected, c.DecisionsMatched)
			require.Greater(t, c.DecisionsExpected, int64(iters))
			require.True(t, c.Passed(), c.FinalDifference)

			// What memreplay_stats_json says (PyTorch's memory_stats() for
			// this allocator) is what a replay of the trace ends with, to
			// the last key: the check bench/gpu-pytorch.sh makes on a GPU.
			for dev := range 2 {
				js, err := l.statsJSON(dev)
				require.NoError(t, err)
				ms, err := replay.ReadMemoryStats(bytes.NewReader(js), "memreplay_stats_json")
				require.NoError(t, err)
				ms.Device = int32(dev)
				res, err := replay.Run(tr.NewReader(), replay.Options{Check: true, ExpectStats: ms})
				require.NoError(t, err)
				sc := res.StatsCheck
				require.Empty(t, sc.Differences, "device %d", dev)
				require.Empty(t, sc.NotCompared, "device %d", dev)
				require.True(t, sc.Passed())
			}
		})
	}
}

// testConcurrentBody runs workers on devices 0 and 1 of l, each a random
// mix of malloc, free (some after record_stream), and empty_cache or
// stats, and checks that all is freed at the end. It returns the
// iterations per worker.
func testConcurrentBody(t *testing.T, l *library) int {
	const workers = 6
	iters := 3000
	if testing.Short() || raceEnabled {
		iters = 800
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			dev := w % 2
			stream := uintptr(w % 3)
			sizes := []uint64{1, 512, 4000, 1<<20 - 1, 1<<20 + 1, 3 << 20, 12 << 20, 30 << 20}
			var live []uintptr
			for i := range iters {
				switch r := rng.IntN(100); {
				case len(live) == 0 || (r < 50 && len(live) < 24):
					p, err := l.malloc(sizes[rng.IntN(len(sizes))]+uint64(rng.IntN(512)), dev, stream)
					if err != nil {
						errs <- err
						return
					}
					live = append(live, p)
				case r < 95 || w != 0:
					k := rng.IntN(len(live))
					p := live[k]
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					if rng.IntN(6) == 0 {
						if err := l.recordStream(p, 11); err != nil {
							errs <- err
							return
						}
					}
					if err := l.free(p); err != nil {
						errs <- err
						return
					}
				default:
					if err := l.emptyCache(); err != nil {
						errs <- err
						return
					}
				}
				if i%100 == w {
					if _, err := l.statsJSON(dev); err != nil {
						errs <- err
						return
					}
				}
			}
			for _, p := range live {
				if err := l.free(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, l.livePointers())
	for dev := range 2 {
		s := libStats(t, l, dev)
		require.Zero(t, s["allocated_bytes.all.current"])
		require.Greater(t, s["allocation.all.allocated"], int64(iters))
	}

	return iters
}

// libStats is memreplay_stats_json's answer for dev, parsed.
func libStats(t *testing.T, l *library, dev int) map[string]int64 {
	t.Helper()
	js, err := l.statsJSON(dev)
	require.NoError(t, err)
	var s map[string]int64
	require.NoError(t, json.Unmarshal(js, &s))
	return s
}

// The recording ring keeps the last MEMREPLAY_MAX_ENTRIES events or so; a
// trace written after it overflowed starts from the layout recorded at its
// first event, and replays exactly from there.
func TestRingOverflow(t *testing.T) {
	const max = 500
	for _, conf := range []string{"", "max_split_size_mb:40", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			l, _ := newTestLib(t, conf, func(o *options) { o.record, o.maxEntries = true, max })
			rng := rand.New(rand.NewPCG(1, 2))
			var live []uintptr
			for i := range 4000 {
				if len(live) == 0 || rng.IntN(2) == 0 {
					p, err := l.malloc(uint64(rng.IntN(8<<20)+1), 0, uintptr(rng.IntN(2)))
					require.NoError(t, err)
					live = append(live, p)
				} else {
					k := rng.IntN(len(live))
					if rng.IntN(8) == 0 {
						require.NoError(t, l.recordStream(live[k], 3))
					}
					require.NoError(t, l.free(live[k]))
					live = append(live[:k], live[k+1:]...)
				}
				if i%700 == 0 {
					require.NoError(t, l.emptyCache())
				}
			}
			tr, err := l.buildTrace(true)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(tr.Events), max/2)
			require.LessOrEqual(t, len(tr.Events), max+8)
			require.False(t, tr.InitialReconstructed)
			require.NotEmpty(t, tr.Initial)
			require.Contains(t, strings.Join(tr.Header.Notes, "\n"), "oldest events; the trace starts from the layout recorded at that point")
			for i := 1; i < len(tr.Events); i++ {
				require.LessOrEqual(t, tr.Events[i-1].TimeUS, tr.Events[i].TimeUS, "oldest first")
			}
			res, err := replay.Run(tr.NewReader(), replay.Options{Check: true})
			require.NoError(t, err)
			c := res.Check
			if conf == "expandable_segments:True" {
				// The replay restores an initial layout as ordinary
				// segments (a snapshot does not carry an expandable
				// segment's pages), so it cannot follow exactly.
				t.Logf("expandable: %d of %d decisions matched", c.DecisionsMatched, c.DecisionsExpected)
				return
			}
			require.Nil(t, c.FirstDivergence, "first divergence: %v", c.FirstDivergence)
			require.Equal(t, c.DecisionsExpected, c.DecisionsMatched)
			require.Greater(t, c.DecisionsExpected, int64(max/8))
			require.True(t, c.Passed(), c.FinalDifference)
		})
	}
}

// The environment: which variables turn what on, and the errors of bad
// values.
func TestOptionsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	o := optionsFromEnv(env())
	require.NoError(t, o.cfgErr)
	require.False(t, o.record)
	require.True(t, o.oomThrow)
	require.Equal(t, defaultMaxEntries, o.maxEntries)
	require.Equal(t, config.Default().MaxSplitSize, o.cfg.MaxSplitSize)

	o = optionsFromEnv(env("MEMREPLAY_TRACE", "/x/t.mrt", "MEMREPLAY_MAX_ENTRIES", "0", "MEMREPLAY_OOM", "null",
		"MEMREPLAY_SNAPSHOT", "/x/s.pickle", "MEMREPLAY_QUIET", "1"))
	require.NoError(t, o.cfgErr)
	require.True(t, o.record)
	require.Equal(t, "/x/t.mrt", o.tracePath)
	require.Equal(t, "/x/s.pickle", o.snapshotPath)
	require.Zero(t, o.maxEntries)
	require.False(t, o.oomThrow)
	require.True(t, o.quiet)

	o = optionsFromEnv(env("MEMREPLAY_RECORD", "1", "PYTORCH_ALLOC_CONF", "expandable_segments:True"))
	require.True(t, o.record)
	require.True(t, o.cfg.ExpandableSegments)

	o = optionsFromEnv(env("MEMREPLAY_ALLOC_CONF", "", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
	require.NoError(t, o.cfgErr)
	require.False(t, o.cfg.ExpandableSegments, "MEMREPLAY_ALLOC_CONF set, even empty, wins")

	o = optionsFromEnv(env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:5"))
	require.ErrorContains(t, o.cfgErr, "PYTORCH_CUDA_ALLOC_CONF: ")
	require.ErrorContains(t, o.cfgErr, "max_split_size_mb")

	o = optionsFromEnv(env("MEMREPLAY_MAX_ENTRIES", "lots", "MEMREPLAY_OOM", "abort", "MEMREPLAY_POLICY", "gmlake"))
	require.ErrorContains(t, o.cfgErr, `MEMREPLAY_MAX_ENTRIES="lots"`)
	require.ErrorContains(t, o.cfgErr, `MEMREPLAY_OOM="abort": want throw or null`)
	require.ErrorContains(t, o.cfgErr, `MEMREPLAY_POLICY: unknown policy "gmlake"`)

	require.Nil(t, optionsFromEnv(env()).policy, "PyTorch's by default")
	o = optionsFromEnv(env("MEMREPLAY_POLICY", "lifetime"))
	require.NoError(t, o.cfgErr)
	require.Equal(t, "lifetime", o.policy.Name())
}

// set_memory_fraction limits the device as PyTorch's does, and a bad
// fraction is PyTorch's error.
func TestMemoryFraction(t *testing.T) {
	l, stderr := newTestLib(t, "", nil)
	require.NoError(t, l.setMemoryFraction(0.01, 0)) // 40.96 MiB of the 4 GiB fake
	_, err := l.malloc(30<<20, 0, 0)
	require.NoError(t, err)
	_, err = l.malloc(30<<20, 0, 0)
	require.ErrorContains(t, err, "CUDA out of memory. Tried to allocate 30.00 MiB.")
	require.ErrorContains(t, err, "40.96 MiB allowed")
	require.Error(t, l.setMemoryFraction(1.5, 0))
	require.Equal(t, "set_memory_fraction on device 0: Invalid fraction value: 1.5. Allowed range: 0~1", l.lastError())
	require.Contains(t, stderr.String(), "memreplay: set_memory_fraction on device 0: Invalid fraction value: 1.5")
	_, err = l.malloc(1, maxDevices, 0)
	require.ErrorContains(t, err, "device 256 out of range")
}

// A sticky driver error (an illegal address, a device-side assert) is
// fatal: the malloc that meets it fails with the driver's names and
// errors.Is(err, allocator.ErrFatal), and so does every later malloc, a
// cached block's too, so that the host (PyTorch, a trial worker) stops
// rather than compute on a corrupted context. Stats stay readable, and
// the devices close cleanly.
func TestStickyErrorIsFatal(t *testing.T) {
	l, stderr := newTestLib(t, "", nil)
	ctl, err := fakecuda.Open(needFake(t))
	require.NoError(t, err)
	small, err := l.malloc(4096, 0, 0)
	require.NoError(t, err)
	require.NoError(t, l.free(small)) // cached: the next 4 KiB malloc needs no driver call

	require.NoError(t, ctl.Sticky(700, 0))
	_, err = l.malloc(64<<20, 0, 0) // a new segment: cuMemAlloc meets the error
	require.ErrorIs(t, err, allocator.ErrFatal)
	require.ErrorContains(t, err, "CUDA_ERROR_ILLEGAL_ADDRESS (700)")
	require.ErrorContains(t, err, "[sticky: the device context is unusable]")
	require.Contains(t, throwMessage(err), "CUDA_ERROR_ILLEGAL_ADDRESS")
	require.Contains(t, stderr.String(), "memreplay: ")

	_, err = l.malloc(4096, 0, 0)
	require.ErrorIs(t, err, allocator.ErrFatal, "a cached block after a sticky error")
	require.Contains(t, l.lastError(), "CUDA_ERROR_ILLEGAL_ADDRESS")
	js, err := l.statsJSON(0)
	require.NoError(t, err)
	var s map[string]int64
	require.NoError(t, json.Unmarshal(js, &s))
	require.EqualValues(t, 1, s["num_device_alloc"])
}

// MEMREPLAY_POLICY reaches the allocator: under stitch, two free 10 MiB
// holes serve a 20 MiB request as one stitched range on the driver (one
// page mapped at two addresses), and memreplay_stats_json counts it.
func TestPolicyStitchOnTheDriver(t *testing.T) {
	l, stderr := newTestLib(t, "", func(o *options) { o.policy = allocator.Stitch{} })
	var ps []uintptr
	for range 5 {
		p, err := l.malloc(10<<20, 0, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	js, err := l.statsJSON(0)
	require.NoError(t, err)
	var st map[string]int64
	require.NoError(t, json.Unmarshal(js, &st))
	// Use up the mapped tail, so that 20 MiB must either grow or stitch.
	tail, err := l.malloc(uint64(st["reserved_bytes.all.current"]-st["allocated_bytes.all.current"]), 0, 0)
	require.NoError(t, err)
	require.NoError(t, l.free(ps[1]))
	require.NoError(t, l.free(ps[3]))
	p, err := l.malloc(20<<20, 0, 0)
	require.NoError(t, err)
	js, err = l.statsJSON(0)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &st))
	require.EqualValues(t, 1, st["num_stitches"], string(js))
	require.NoError(t, l.free(p))
	require.NoError(t, l.free(tail))
	require.Empty(t, stderr.String())
}

// A record_stream on one thread while a malloc on another releases cached
// segments (its retry under a memory fraction): the recording must keep
// each call's events where the allocator made them, and replay decision
// for decision. The record_stream's entry used to be written after the
// allocator's call, outside its lock, so another thread's malloc could
// write its segment frees in between; a replay then met the frees before
// the malloc that explains them (a recorded segment_free or segment_unmap
// "the replay did not do", once in about a hundred runs of the threaded
// tests above).
func TestRecordStreamDuringAReleaseRecordsInOrder(t *testing.T) {
	ctl, err := fakecuda.Open(needFake(t))
	require.NoError(t, err)
	// Blocks over 20 MiB are not split, and serve only requests at most
	// 20 MiB smaller; the device has room for one at a time.
	_, err = openFake(t)() // cuInit first: it would set the capacity from the environment
	require.NoError(t, err)
	require.NoError(t, ctl.Reset(96<<20, 2<<20, 0))
	// The fake is the process's: the next test finds it as the others
	// leave it (after the library's own cleanup, registered below).
	t.Cleanup(func() { require.NoError(t, ctl.Reset(inProcCapacity, 2<<20, 0)) })
	l, stderr := newTestLib(t, "max_split_size_mb:20", func(o *options) { o.record = true })
	n := 4000
	if raceEnabled {
		n = 1000
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	run := func(f func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	run(func(i int) error { // 40 and 62 MiB in turn: each releases the other's cached segment
		p, err := l.malloc(uint64(40+22*(i%2))<<20, 0, 0)
		if err != nil {
			return err
		}
		return l.free(p)
	})
	run(func(int) error {
		p, err := l.malloc(4096, 0, 0)
		if err != nil {
			return err
		}
		if err := l.recordStream(p, 11); err != nil {
			return err
		}
		return l.free(p)
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, stderr.String())

	tr, err := l.buildTrace(true)
	require.NoError(t, err)
	frees := 0
	for _, e := range tr.Events {
		if e.Action == trace.ActionSegmentFree {
			frees++
		}
	}
	require.Greater(t, frees, n/2, "the mallocs released segments")
	res, err := replay.Run(tr.NewReader(), replay.Options{Check: true})
	require.NoError(t, err)
	c := res.Check
	requireNoDivergence(t, c, func(path string) error { return trace.WriteFile(path, tr) })
	require.True(t, c.Passed(), c.FinalDifference)
}

// Once a training step's blocks are cached, repeating the step makes no
// driver call at all, with or without expandable segments, as PyTorch's
// allocator makes none: every call on a GPU costs microseconds (cuMemGetInfo
// took 5 µs on the H200 machine), so one per malloc would show in every
// step. Checked because libmemreplay's steps with expandable segments
// measured up to 20% slower than PyTorch's in one of three pairs on an H200
// (docs/libmemreplay.md, "GPU checks"): not for this reason.
func TestSteadyStateMakesNoDriverCall(t *testing.T) {
	ctl, err := fakecuda.Open(needFake(t))
	require.NoError(t, err)
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			l, stderr := newTestLib(t, conf, nil)
			sizes := []uint64{1000, 4 << 20, 30 << 20, 123456, 12 << 20, 700, 64 << 20}
			step := func() {
				var ps []uintptr
				for _, s := range sizes {
					p, err := l.malloc(s, 0, 0)
					require.NoError(t, err)
					ps = append(ps, p)
				}
				for _, p := range ps {
					require.NoError(t, l.free(p))
				}
			}
			step() // the first step allocates the segments
			step()
			// Every driver entry point the backend resolves (docs/cuda.md).
			names := strings.Fields(`cuInit cuDriverGetVersion cuDeviceGetCount cuDeviceGet cuDeviceGetName
				cuDeviceTotalMem_v2 cuDeviceGetAttribute cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2
				cuCtxGetCurrent cuCtxSetCurrent cuCtxSynchronize cuMemAlloc_v2 cuMemFree_v2 cuMemGetInfo_v2
				cuMemGetAllocationGranularity cuMemAddressReserve cuMemAddressFree cuMemCreate cuMemMap
				cuMemSetAccess cuMemUnmap cuMemRelease cuEventCreate cuEventRecord cuEventQuery
				cuEventSynchronize cuEventDestroy_v2 cuStreamSynchronize cuGetErrorName cuGetErrorString`)
			calls := func() (n int64) {
				for _, f := range names {
					c := ctl.Count(f)
					require.GreaterOrEqual(t, c, int64(0), "the fake knows %s", f)
					n += c
				}
				return n
			}
			before := calls()
			require.Positive(t, before)
			for range 100 {
				step()
			}
			require.Equal(t, before, calls(), "driver calls in 100 cached steps")
			require.Empty(t, stderr.String())
		})
	}
}

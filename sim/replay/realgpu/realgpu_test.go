package realgpu_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/allocator/cuda"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/sim/replay/realgpu"
	"github.com/memreplay/memreplay/trace"
)

// Every real PyTorch trace replays with --check on the GPU backend (here on
// the fake driver) to every recorded decision and the recorded final
// layout, as on the simulator, with the simulator's statistics and device
// call counts, measured time, and nothing left on the GPU after Close.
// None of them needs the GPU's event timing: the Process keeps the
// replay's clock (package comment), so even their inferred deferred frees
// come back when the trace says.
func TestRealTracesCheckOnGPU(t *testing.T) {
	paths, sharedMissing := realTraces(t)
	if sharedMissing {
		t.Log("../shared/traces/pytorch is not beside the checkout: only traces/pytorch is replayed")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			tr, err := trace.ReadPyTorchFile(path)
			require.NoError(t, err)
			_, err = replay.Prepare(tr)
			require.NoError(t, err)
			want, err := replay.Run(tr.NewReader(), replay.Options{Check: true})
			require.NoError(t, err)
			// A trace without decisions has nothing to check; its end
			// state must still follow from the rebuilt initial one.
			nothing := want.Check.NothingToCheck
			require.True(t, want.Check.Passed() || nothing, "on the simulator")

			ctl := needFake(t, 64*gib)
			b := open(t, realgpu.Options{})
			checks := !raceEnabled || len(tr.Events) < 5000
			got, err := replay.Run(tr.NewReader(), replay.Options{Check: true, NewProcess: b.NewProcess, InvariantChecks: checks})
			require.NoError(t, err)
			ch := got.Check
			require.Nil(t, ch.FirstDivergence, "first divergence: %v", ch.FirstDivergence)
			require.Equal(t, want.Check.DecisionsExpected, ch.DecisionsExpected)
			require.Equal(t, ch.DecisionsExpected, ch.DecisionsMatched)
			require.Equal(t, nothing, ch.NothingToCheck)
			require.True(t, ch.Passed() || nothing, ch.FinalDifference)
			if ch.FinalSegmentsMatch != nil {
				require.True(t, *ch.FinalSegmentsMatch, ch.FinalDifference)
			}
			require.Equal(t, want.Events, got.Events)
			require.Len(t, got.Devices, len(want.Devices))
			for i, d := range got.Devices {
				w := want.Devices[i]
				require.Equal(t, w.Stats, d.Stats)
				sameCalls(t, w.Counters, d.Counters)
				require.True(t, d.TimeMeasured)
				require.Equal(t, "memreplay fake GPU, cuda:0", d.Name)
				require.Equal(t, realgpu.CapacityDevice, d.CapacitySource)
				require.EqualValues(t, 64*gib, d.Capacity)
				if d.Counters.Total.Calls > 0 {
					require.Positive(t, d.Counters.Total.Time, "measured")
				}
			}
			// The fake's own counts: every cudaMalloc of the replay reached
			// the driver, the restore's included.
			var mallocs, frees uint64
			for _, p := range b.Processes() {
				c := p.Counters()
				mallocs += c.Get(gpu.CallMalloc).Calls
				frees += c.Get(gpu.CallFree).Calls
			}
			require.EqualValues(t, ctl.Count("cuMemAlloc_v2"), mallocs)
			require.EqualValues(t, ctl.Count("cuMemFree_v2"), frees)
			require.NoError(t, b.Close())
			require.Zero(t, ctl.Stat("used"), "bytes left on the GPU")
			require.Zero(t, ctl.Stat("live"), "driver objects left")
		})
	}
}

var checkConfs = []string{
	"",
	"expandable_segments:True",
	"max_split_size_mb:20",
	"garbage_collection_threshold:0.6,max_split_size_mb:40",
	"roundup_power2_divisions:[256:8,>:2]",
	"expandable_segments:True,garbage_collection_threshold:0.5",
	"per_process_memory_fraction:0.5",
}

// A random recorded workload (OOMs, record_stream frees on two streams
// completed apart, empty_cache) under several settings replays with
// --check on the GPU to every decision: with the GPU's whole memory, where
// the device wrapper scripts the recording's OOMs; with the recording's
// capacity as the limit; and on an idle GPU, whose events complete as soon
// as they are recorded (the replay's clock holds them back). And without
// --check, the limit makes the GPU run out exactly where the recording's
// simulated device did.
func TestRecordedWorkloadOnGPU(t *testing.T) {
	seeds, steps := uint64(2), 1500
	if raceEnabled || testing.Short() {
		seeds, steps = 1, 800
	}
	const capacity = 600 * mib
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/%d", conf, seed), func(t *testing.T) {
				tr, cfg, stats := recordWorkload(t, conf, capacity, seed, steps)
				require.Positive(t, stats.NumOOMs, "the workload runs out of memory")
				for _, run := range []struct {
					limit uint64
					idle  bool
				}{{0, false}, {capacity, false}, {capacity, true}} {
					limit := run.limit
					if limit == 0 && (cfg.PerProcessMemoryFraction < 1 || cfg.ExpandableSegments) {
						// Both scale with the device's memory: the fraction
						// is of it, and an expandable segment reserves
						// 1.125 times it in address space. Of 4 GiB here, of
						// 600 MiB in the recording: the replay decides as
						// the program would on this GPU, not as recorded
						// (the reservations overlap the recorded ones, so
						// the recorded addresses cannot be kept). The
						// limit (--capacity) makes the GPU the recording's.
						continue
					}
					ctl := needFake(t, 4*gib)
					b := open(t, realgpu.Options{Capacity: limit})
					newProc := b.NewProcess
					if run.idle {
						newProc = onIdleGPU(b, ctl)
					}
					res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, Check: true, InvariantChecks: true, NewProcess: newProc})
					require.NoError(t, err)
					c := res.Check
					require.Nil(t, c.FirstDivergence, "%+v: first divergence: %v", run, c.FirstDivergence)
					require.Greater(t, c.DecisionsExpected, int64(100))
					require.True(t, c.Passed(), c.FinalDifference)
					got := res.Devices[0].Stats
					require.Equal(t, stats.NumOOMs, got.NumOOMs)
					require.Equal(t, stats.NumAllocRetries, got.NumAllocRetries)
					require.Equal(t, stats.ReservedBytes, got.ReservedBytes)
					require.NoError(t, b.Close())
					require.Zero(t, ctl.Stat("used"))
					require.Zero(t, ctl.Stat("live"))
				}

				ctl := needFake(t, 4*gib)
				b := open(t, realgpu.Options{Capacity: capacity})
				res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, OOM: replay.OOMSkip, NewProcess: b.NewProcess})
				require.NoError(t, err)
				got := res.Devices[0]
				require.Equal(t, stats.NumOOMs, got.Stats.NumOOMs)
				require.Equal(t, stats.ReservedBytes, got.Stats.ReservedBytes)
				require.Equal(t, stats.NumAllocRetries, got.Stats.NumAllocRetries)
				require.Empty(t, res.Problems)
				require.Equal(t, "option", got.CapacitySource)
				require.EqualValues(t, capacity, got.Capacity)
				// The limit refused cudaMallocs (or cuMemCreates) the
				// driver never saw.
				c := b.Processes()[0].Counters()
				refused := c.Get(gpu.CallMalloc).Failures + c.Get(gpu.CallCreatePage).Failures
				if cfg.PerProcessMemoryFraction == 1 {
					// (With a fraction below the limit the allocator
					// refuses first, without a device call.)
					require.Positive(t, refused)
				}
				require.Zero(t, ctl.Failures("cuMemAlloc_v2")+ctl.Failures("cuMemCreate"))
			})
		}
	}
}

// The counters count each call the allocator made under its kind, as the
// simulator does, agree with the driver's own counts where each call is
// one driver call, and measure time.
func TestCountersMeasureDriverCalls(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			tr, cfg, _ := recordWorkload(t, conf, 600*mib, 3, 600)
			want, err := replay.RunTrace(tr, replay.Options{Config: &cfg, Check: true})
			require.NoError(t, err)

			ctl := needFake(t, 4*gib)
			b := open(t, realgpu.Options{Capacity: 600 * mib}) // the recording's, for the expandable reservations
			res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, Check: true, NewProcess: b.NewProcess})
			require.NoError(t, err)
			require.True(t, res.Check.Passed())
			sameCalls(t, want.Devices[0].Counters, res.Devices[0].Counters)

			c := b.Processes()[0].Counters() // restore included: none here
			one := map[gpu.Call]string{
				gpu.CallMalloc:         "cuMemAlloc_v2",
				gpu.CallFree:           "cuMemFree_v2",
				gpu.CallMemGetInfo:     "cuMemGetInfo_v2",
				gpu.CallEventRecord:    "cuEventRecord",
				gpu.CallAddressReserve: "cuMemAddressReserve",
				gpu.CallAddressFree:    "cuMemAddressFree",
				gpu.CallCreatePage:     "cuMemCreate",
				gpu.CallMap:            "cuMemMap",
				gpu.CallSetAccess:      "cuMemSetAccess",
				gpu.CallUnmap:          "cuMemUnmap",
				gpu.CallRelease:        "cuMemRelease",
			}
			for call, fn := range one {
				require.EqualValues(t, ctl.Count(fn), c.Get(call).Calls, "%s = %s", call, fn)
			}
			// A query (or wait) for an event the driver already reported
			// complete is the replay's clock's alone; the clock's own
			// synchronisations are not counted.
			require.LessOrEqual(t, ctl.Count("cuEventQuery"), int64(c.Get(gpu.CallEventQuery).Calls))
			require.LessOrEqual(t, ctl.Count("cuEventSynchronize"), int64(c.Get(gpu.CallEventSync).Calls))
			require.GreaterOrEqual(t, ctl.Count("cuStreamSynchronize"), int64(c.Get(gpu.CallStreamSync).Calls))
			require.Equal(t, c.Get(gpu.CallFree).Calls-c.Get(gpu.CallFree).Failures, c.Get(gpu.CallDeviceSync).Calls,
				"every cudaFree synchronises the device")
			require.Zero(t, c.Get(gpu.CallDeviceSync).Time, "its time is the cudaFree's")

			require.Positive(t, c.Get(gpu.CallEventRecord).Calls)
			if cfg.ExpandableSegments {
				require.Positive(t, c.Get(gpu.CallCreatePage).Time)
				require.Positive(t, c.Get(gpu.CallMap).Calls)
				require.Positive(t, c.Get(gpu.CallUnmap).Calls)
			} else {
				require.Positive(t, c.Get(gpu.CallMalloc).Calls)
				require.Positive(t, c.Get(gpu.CallMalloc).Time)
			}
			var sum gpu.Counter
			for _, v := range c.ByCall {
				sum.Calls += v.Calls
				sum.Time += v.Time
			}
			require.Equal(t, sum.Calls, c.Total.Calls)
			require.Equal(t, sum.Time, c.Total.Time)
			require.True(t, b.Processes()[0].Info().MeasuredTime)
		})
	}
}

// The replay's clock, not the driver's, decides when an event is complete:
// on an idle GPU (and on the fake after a synchronisation) the driver
// reports every event done at once, but a free waiting on the trace's
// stream 5 must wait until the trace says the stream caught up.
func TestEventsFollowTheTrace(t *testing.T) {
	ctl := needFake(t, gib)
	b := open(t, realgpu.Options{})
	pr, err := b.NewProcess(0, 0, "")
	require.NoError(t, err)
	p := pr.(*realgpu.Process)

	e5, err := p.RecordEvent(5)
	require.NoError(t, err)
	e7, err := p.RecordEvent(7)
	require.NoError(t, err)
	require.EqualValues(t, 2, ctl.Stat("pending"), "both on the driver's default stream")

	// Synchronising stream 7 waits for the default stream: the driver is
	// done with both events; the trace's stream 5 is not.
	require.NoError(t, p.SynchronizeStream(7))
	require.Zero(t, ctl.Stat("pending"))
	done, err := p.QueryEvent(e7)
	require.NoError(t, err)
	require.True(t, done)
	done, err = p.QueryEvent(e5)
	require.NoError(t, err)
	require.False(t, done, "the trace has not completed stream 5")
	done, err = p.QueryEvent(e5)
	require.NoError(t, err)
	require.False(t, done)
	p.CompleteEvents(5)
	done, err = p.QueryEvent(e5)
	require.NoError(t, err)
	require.True(t, done)
	_, err = p.QueryEvent(e5)
	require.Error(t, err, "a completed event is forgotten")
	c := p.Counters()
	require.EqualValues(t, 5, c.Get(gpu.CallEventQuery).Calls)
	require.EqualValues(t, 1, c.Get(gpu.CallEventQuery).Failures)
	require.EqualValues(t, 2, ctl.Count("cuEventQuery"), "the driver was asked once per event")

	// The clock's completion of an event the driver has not finished
	// synchronises the default stream, uncounted.
	e9, err := p.RecordEvent(9)
	require.NoError(t, err)
	done, err = p.QueryEvent(e9)
	require.NoError(t, err)
	require.False(t, done)
	p.CompleteEvents(9)
	require.Zero(t, ctl.Stat("pending"))
	done, err = p.QueryEvent(e9)
	require.NoError(t, err)
	require.True(t, done)
	require.Zero(t, p.Counters().Get(gpu.CallStreamSync).Calls-1)

	// cudaFree synchronises the device: every event completes.
	a, err := p.Malloc(3 * mib)
	require.NoError(t, err)
	require.GreaterOrEqual(t, a, realgpu.AddressOffset, "the replay sees the driver's pointer shifted")
	arena := uint64(ctl.Stat("arena"))
	require.True(t, a-realgpu.AddressOffset >= arena && a-realgpu.AddressOffset < arena+uint64(ctl.Stat("arena_size")),
		"%#x: the fake's pointer plus 2^56", a)
	e11, err := p.RecordEvent(11)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	done, err = p.QueryEvent(e11)
	require.NoError(t, err)
	require.True(t, done)

	// SynchronizeEvent completes its stream's earlier events, not others'.
	x1, _ := p.RecordEvent(12)
	x2, _ := p.RecordEvent(13)
	x3, _ := p.RecordEvent(12)
	require.NoError(t, p.SynchronizeEvent(x3))
	done, err = p.QueryEvent(x1)
	require.NoError(t, err)
	require.True(t, done)
	done, err = p.QueryEvent(x2)
	require.NoError(t, err)
	require.False(t, done)
}

// Options.Capacity makes a smaller GPU: it cannot exceed the device; a
// malloc past it fails as the driver's out of memory, counted; cudaMemGetInfo
// reports the limit.
func TestCapacityLimit(t *testing.T) {
	needFake(t, gib)
	_, err := realgpu.Open(realgpu.Options{Library: fakeLib, Capacity: 2 * gib})
	require.ErrorIs(t, err, realgpu.ErrCapacity)
	require.Contains(t, err.Error(), "2.00 GiB asked for, memreplay fake GPU, cuda:0 has 1024.00 MiB")

	b := open(t, realgpu.Options{Capacity: 100 * mib})
	pr, err := b.NewProcess(0, 0, "")
	require.NoError(t, err)
	p := pr.(*realgpu.Process)
	free, total, err := p.MemGetInfo()
	require.NoError(t, err)
	require.EqualValues(t, 100*mib, total)
	require.EqualValues(t, 100*mib, free)
	x, err := p.Malloc(60 * mib)
	require.NoError(t, err)
	_, err = p.Malloc(41 * mib)
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	require.Contains(t, err.Error(), "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY")
	_, err = p.Malloc(1 << 63)
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	y, err := p.Malloc(39*mib + 1) // 40 MiB with the granularity: exactly the rest
	require.NoError(t, err)
	_, err = p.CreatePage(2 * mib)
	require.ErrorIs(t, err, allocator.ErrDeviceOutOfMemory)
	free, _, err = p.MemGetInfo()
	require.NoError(t, err)
	require.Zero(t, free)
	require.NoError(t, p.Free(x))
	require.NoError(t, p.Free(y))
	require.Zero(t, p.Held())
	c := p.Counters()
	require.EqualValues(t, 4, c.Get(gpu.CallMalloc).Calls)
	require.EqualValues(t, 2, c.Get(gpu.CallMalloc).Failures)
	require.EqualValues(t, 2, c.Get(gpu.CallDeviceSync).Calls)
	info := p.Info()
	require.Equal(t, "option", info.CapacitySource)
	require.EqualValues(t, 100*mib, info.Capacity)
}

// Close leaves nothing on the GPU, even while someone else (a trainer's
// runtime, here another handle on the device) keeps the primary context
// alive: live blocks, cached segments, mapped pages, reservations and
// events still waiting for a trace's stream.
func TestCloseLeavesNothing(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			ctl := needFake(t, 4*gib)
			drv, err := cuda.Open(cuda.WithLibrary(fakeLib))
			require.NoError(t, err)
			other, err := drv.Device(0)
			require.NoError(t, err)
			defer other.Close()

			tr, cfg, stats := recordWorkload(t, conf, 600*mib, 4, 400)
			require.Positive(t, stats.AllocatedBytes[allocator.StatAll].Current, "blocks live at the end")
			b := open(t, realgpu.Options{})
			_, err = replay.RunTrace(tr, replay.Options{Config: &cfg, NewProcess: b.NewProcess})
			require.NoError(t, err)
			require.Positive(t, ctl.Stat("used"))
			require.NoError(t, b.Close())
			require.Zero(t, ctl.Stat("used"), "bytes left")
			require.Zero(t, ctl.Stat("live"), "allocations, pages, reservations, events left")
			// Counters stay readable; the process refuses work.
			require.Positive(t, b.Processes()[0].Counters().Total.Calls)
			_, err = b.Processes()[0].Malloc(mib)
			require.Error(t, err)
			require.NoError(t, b.Close(), "a second Close does nothing")
		})
	}
}

// A sticky driver error (the context is corrupted) ends the replay with
// the CUDA error's name; Close still releases the context.
func TestStickyErrorEndsTheReplay(t *testing.T) {
	ctl := needFake(t, 4*gib)
	tr, cfg, _ := recordWorkload(t, "", 600*mib, 5, 400)
	b := open(t, realgpu.Options{})
	require.NoError(t, ctl.Sticky(700, 20))
	res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, NewProcess: b.NewProcess})
	require.Error(t, err)
	require.ErrorIs(t, err, allocator.ErrFatal)
	require.Contains(t, err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS")
	require.Regexp(t, `^replay: event \d+: `, err.Error(), "names the event")
	require.NotNil(t, res)
	require.NoError(t, b.Close(), "a corrupted context's errors are not Close's")
	require.Zero(t, ctl.Stat("used"))
}

// No driver, no GPU, no such GPU: one error each, saying which.
func TestOpenErrors(t *testing.T) {
	_, err := realgpu.Open(realgpu.Options{Library: filepath.Join(t.TempDir(), "libcuda.so.1")})
	if errors.Is(err, cuda.ErrNoCgo) {
		t.Skip("built without cgo: every Open fails with ", err)
	}
	require.ErrorIs(t, err, cuda.ErrNoDriver)
	require.NotContains(t, strings.TrimSpace(err.Error()), "\n")

	needFake(t, gib)
	_, err = realgpu.Open(realgpu.Options{Library: fakeLib, Ordinal: 1})
	require.ErrorIs(t, err, cuda.ErrNoDevice)
	t.Setenv("FAKECUDA_DEVICES", "0")
	_, err = realgpu.Open(realgpu.Options{Library: fakeLib})
	require.ErrorIs(t, err, cuda.ErrNoDevice)
	require.Contains(t, err.Error(), "CUDA_ERROR_NO_DEVICE")
}

// A replay under another setting than the recording's (no --check: the
// device wrapper places segments where the driver put them) decides as on
// the simulator: the fake hands out addresses as the simulator does, and
// the replay sees them above 2^56 like the simulator's.
func TestOtherSettingsAsOnTheSimulator(t *testing.T) {
	paths, _ := realTraces(t)
	tr, err := trace.ReadPyTorchFile(paths[0])
	require.NoError(t, err)
	_, err = replay.Prepare(tr)
	require.NoError(t, err)
	for _, conf := range []string{"expandable_segments:True", "max_split_size_mb:64"} {
		t.Run(conf, func(t *testing.T) {
			cfg, err := config.Parse(conf)
			require.NoError(t, err)
			want, err := replay.Run(tr.NewReader(), replay.Options{Config: &cfg, Capacity: 8 * gib})
			require.NoError(t, err)
			needFake(t, 16*gib)
			b := open(t, realgpu.Options{Capacity: 8 * gib})
			got, err := replay.Run(tr.NewReader(), replay.Options{Config: &cfg, NewProcess: b.NewProcess, InvariantChecks: true})
			require.NoError(t, err)
			require.Equal(t, want.Devices[0].Stats, got.Devices[0].Stats)
			sameCalls(t, want.Devices[0].Counters, got.Devices[0].Counters)
			segs := got.Devices[0].Final.Segments
			require.NotEmpty(t, segs)
			fresh := 0
			for _, s := range segs {
				if s.Address >= realgpu.AddressOffset {
					fresh++
				}
			}
			require.Positive(t, fresh, "segments the trace did not place are the driver's, shifted")
		})
	}
}

// A trace of two devices replays on the one GPU, each device as a Process
// of its own sharing the GPU's memory, with the same decisions; both are
// closed with the backend.
func TestTwoDevicesOnOneGPU(t *testing.T) {
	tr, stats := replaytest.RecordTwoDevices(t)

	ctl := needFake(t, 4*gib)
	b := open(t, realgpu.Options{})
	res, err := replay.RunTrace(tr, replay.Options{Check: true, InvariantChecks: true, NewProcess: b.NewProcess})
	require.NoError(t, err)
	require.True(t, res.Check.Passed(), "%v %s", res.Check.FirstDivergence, res.Check.FinalDifference)
	require.Len(t, res.Devices, 2)
	require.Len(t, b.Processes(), 2)
	var held uint64
	for d, p := range b.Processes() {
		require.Equal(t, stats[d].ReservedBytes, res.Devices[d].Stats.ReservedBytes)
		held += p.Held()
	}
	require.EqualValues(t, ctl.Stat("used"), held, "both on the one GPU")
	require.NoError(t, b.Close())
	require.Zero(t, ctl.Stat("used"))
	require.Zero(t, ctl.Stat("live"))
}

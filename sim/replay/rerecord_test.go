package replay_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/trace"
)

const trialTraces = "../../traces/trial"

// trialTrace reads a generated trial trace from traces/trial.
func trialTrace(t *testing.T, name string) *trace.Trace {
	return replaytest.TrialTrace(t, filepath.Join(trialTraces, name))
}

// recordReplay replays tr (prepared) with opts and a ReplayRecorder, and
// returns the recording and the replay's result.
func recordReplay(t *testing.T, tr *trace.Trace, opts replay.Options) (*trace.Trace, *replay.Result) {
	t.Helper()
	_, err := replay.Prepare(tr)
	require.NoError(t, err)
	r := tr.NewReader()
	rr := replay.NewReplayRecorder(r, replay.ReplayRecordOptions{Name: "test"})
	opts.Recorder = rr
	res, err := replay.Run(r, opts)
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	rec := rr.Trace()
	require.NotNil(t, rec)
	require.Equal(t, int64(len(rec.Events)), rr.Events())
	return rec, res
}

// requireReplaysExactly replays the recording rec of a replay under cfg in
// check mode: every decision and the final layout must match.
func requireReplaysExactly(t *testing.T, rec *trace.Trace, cfg *config.Config) *replay.Result {
	t.Helper()
	var decisions int64
	for _, e := range rec.Events {
		if e.Action == trace.ActionAlloc || e.Action.IsDecision() {
			decisions++
		}
	}
	// Invariant checks walk every block after every operation: only on
	// the shorter traces.
	checks := !raceEnabled && len(rec.Events) < 5000
	res, err := replay.RunTrace(rec, replay.Options{Config: cfg, Check: true, InvariantChecks: checks})
	require.NoError(t, err)
	c := res.Check
	require.Nil(t, c.FirstDivergence, "first divergence: %v", c.FirstDivergence)
	require.Equal(t, decisions, c.DecisionsExpected)
	require.Equal(t, c.DecisionsExpected, c.DecisionsMatched)
	require.NotNil(t, c.FinalSegmentsMatch)
	require.True(t, *c.FinalSegmentsMatch, c.FinalDifference)
	// A recording with no alloc has nothing to check beyond its end state.
	require.Equal(t, decisions == 0, c.NothingToCheck)
	require.Equal(t, decisions > 0, c.Passed())
	require.Empty(t, res.Problems)
	require.Equal(t, int64(len(rec.Events)), res.Events)
	return res
}

// requireFinalIsSnapshot checks that the recording's end state is the
// replaying allocators' end snapshot, device by device.
func requireFinalIsSnapshot(t *testing.T, rec *trace.Trace, res *replay.Result) {
	t.Helper()
	require.True(t, rec.HasFinal)
	var want []trace.Segment
	for _, d := range res.Devices {
		want = append(want, replay.SnapshotSegments(d.Final)...)
	}
	got := append([]trace.Segment(nil), rec.Final...)
	for i := range got {
		got[i].Blocks = append([]trace.Block(nil), got[i].Blocks...)
		for j := range got[i].Blocks {
			got[i].Blocks[j].Stack = 0 // SnapshotSegments has none
		}
	}
	require.Equal(t, want, got)
}

// requireStacks checks that the recording's alloc events carry the
// replayed trace's stacks, alloc for alloc, by frame content, when the
// replay served every alloc.
func requireStacks(t *testing.T, src, rec *trace.Trace, recStacks *trace.Stacks) {
	t.Helper()
	var want, got []trace.Event
	for _, e := range src.Events {
		if e.Action == trace.ActionAlloc {
			want = append(want, e)
		}
	}
	for _, e := range rec.Events {
		if e.Action == trace.ActionAlloc {
			got = append(got, e)
		}
	}
	require.Len(t, got, len(want))
	withStack := 0
	for i := range want {
		require.Equal(t, want[i].Size, got[i].Size, "alloc %d", i)
		require.Equal(t, src.Stacks.Frames(want[i].Stack), recStacks.Frames(got[i].Stack), "alloc %d", i)
		if want[i].Stack != 0 {
			withStack++
		}
	}
	if len(want) > 0 {
		require.Positive(t, withStack, "the test needs a trace with stacks")
	}
}

// requireBlockFrames checks that the active blocks of want have the same
// frames in got, found by address (a block live before the trace without a
// stack may have replay.BeforeTraceFrame), and returns how many have
// frames of their own.
func requireBlockFrames(t *testing.T, want []trace.Segment, wantStacks *trace.Stacks, got []trace.Segment, gotStacks *trace.Stacks) int {
	t.Helper()
	frames := map[uint64][]trace.Frame{}
	for _, s := range got {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				frames[b.Address] = gotStacks.Frames(b.Stack)
			}
		}
	}
	n := 0
	for _, s := range want {
		for _, b := range s.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			f, ok := frames[b.Address]
			require.True(t, ok, "active block at %#x", b.Address)
			wf := wantStacks.Frames(b.Stack)
			if len(wf) == 0 && len(f) == 1 && f[0] == replay.BeforeTraceFrame {
				// Live before the trace with no stack: the replay names it.
				continue
			}
			require.Equal(t, wf, f, "block at %#x", b.Address)
			if len(f) > 0 {
				n++
			}
		}
	}
	return n
}

// Replays of the real PyTorch traces (one complete, one partial whose
// start is reconstructed), of a generated trial trace, under their own
// settings and under others, record traces that replay exactly, end where
// the replaying allocator ended and carry the original stacks.
func TestRecordingOfReplayReplaysExactly(t *testing.T) {
	type input struct {
		name string
		load func(*testing.T) *trace.Trace
	}
	inputs := []input{
		{"pytorch-complete", func(t *testing.T) *trace.Trace { return realTrace(t, "cs336_silmont2000_mem_snapshot.pickle") }},
		{"pytorch-partial", func(t *testing.T) *trace.Trace {
			return realTrace(t, "cs336_silmont2000_memory_forward_fp32_128.pickle")
		}},
		{"trial", func(t *testing.T) *trace.Trace { return trialTrace(t, "roberta-large_b8_s256_fp32.mrt") }},
		{"trial-ckpt", func(t *testing.T) *trace.Trace { return trialTrace(t, "deberta-v3-base_b8_s256_bf16_ckpt.mrt") }},
	}
	for _, in := range inputs {
		for _, conf := range []string{"own", "expandable_segments:True", "max_split_size_mb:20", "roundup_power2_divisions:4"} {
			t.Run(in.name+"/"+conf, func(t *testing.T) {
				src := in.load(t)
				opts := replay.Options{}
				var cfg *config.Config
				if conf != "own" {
					c := mustParse(t, conf)
					cfg = &c
					opts.Config = cfg
				} else if in.name != "trial" && in.name != "trial-ckpt" {
					opts.Check = true // the PyTorch traces' decisions, checked as they are recorded
				}
				rec, res := recordReplay(t, src, opts)
				if opts.Check {
					require.Nil(t, res.Check.FirstDivergence)
					require.True(t, *res.Check.FinalSegmentsMatch, res.Check.FinalDifference)
					require.Equal(t, res.Check.DecisionsExpected, res.Check.DecisionsMatched)
				}
				require.Empty(t, res.OOMs)
				require.Equal(t, replay.SourceReplay, rec.Header.Source)
				require.Equal(t, "test", rec.Header.SourceFile)
				back, err := config.FromAllocatorSettings(rec.Header.AllocatorSettings)
				require.NoError(t, err)
				require.Equal(t, res.Config.String(), back.String())
				require.NotEmpty(t, rec.Header.Notes)
				require.Contains(t, rec.Header.Notes[0], "replay of a ")
				if res.Reconstructed != nil {
					require.True(t, rec.InitialReconstructed)
					require.Len(t, rec.Initial, res.Reconstructed.Segments)
				} else {
					require.Empty(t, rec.Initial)
				}
				requireFinalIsSnapshot(t, rec, res)
				requireStacks(t, src, rec, rec.Stacks)
				if opts.Check {
					// Same decisions, same addresses: the active blocks at
					// the end have the recorded frames.
					n := requireBlockFrames(t, src.Final, src.Stacks, rec.Final, rec.Stacks)
					if in.name == "pytorch-complete" {
						require.Equal(t, 10, n, "its 10 live blocks at the end have frames")
					}
				}
				// Replayed from its own header's settings (nil Config).
				again := requireReplaysExactly(t, rec, nil)
				require.Equal(t, res.Devices[0].Stats.NumDeviceAlloc, again.Devices[0].Stats.NumDeviceAlloc)
				require.Equal(t, res.Devices[0].Stats.ReservedBytes, again.Devices[0].Stats.ReservedBytes)
				require.Equal(t, res.Devices[0].Stats.AllocatedBytes, again.Devices[0].Stats.AllocatedBytes)
			})
		}
	}
}

// Every real trace (those of ../shared/traces/pytorch when present: state
// only, with pending frees, with inferred sizes), replayed with its own
// settings and with others, records a trace that replays exactly.
func TestRecordingOfRealTraces(t *testing.T) {
	for _, file := range []string{
		"cs336_silmont2000_memory_forward_bf16_128.pickle",
		"cs336_wedsonlin_medium_128_inference.pickle",
		"cs336_wedsonlin_medium_128_training.pickle",
		"flexgen_opt1.3b_oom_snapshot_legacy.pickle",
		"flexgen_opt1.3b_snapshot_legacy.pickle",
		"sketchkv2_my_snapshot.pickle",
		"verl_megatron_vllm_qwen2_mem.pickle",
		"zijiandu_attention_memory_segments_only.pickle",
	} {
		for _, conf := range []string{"own", "expandable_segments:True", "max_split_size_mb:64"} {
			t.Run(file+"/"+conf, func(t *testing.T) {
				src := realTrace(t, file)
				opts := replay.Options{Check: conf == "own", OOM: replay.OOMSkip}
				if conf != "own" {
					c := mustParse(t, conf)
					opts.Config = &c
				}
				rec, res := recordReplay(t, src, opts)
				if opts.Check {
					require.Nil(t, res.Check.FirstDivergence)
					require.True(t, *res.Check.FinalSegmentsMatch, res.Check.FinalDifference)
					require.Equal(t, res.Check.DecisionsExpected, res.Check.DecisionsMatched)
					requireBlockFrames(t, src.Final, src.Stacks, rec.Final, rec.Stacks)
				}
				require.True(t, rec.InitialReconstructed)
				require.NotEmpty(t, rec.Initial)
				requireFinalIsSnapshot(t, rec, res)
				if len(res.OOMs) == 0 {
					requireStacks(t, src, rec, rec.Stacks)
				}
				requireReplaysExactly(t, rec, nil)
			})
		}
	}
}

// The harsh random workload (frees waiting on a side stream, empty_cache,
// OOMs), replayed as recorded and stripped to what PyTorch records: the
// replay infers empty_cache calls and makes frees wait on private streams;
// the recording makes both explicit, so that it replays exactly under every
// setting, whatever the inference got right.
func TestRecordingOfInferredReplayReplaysExactly(t *testing.T) {
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= seeds(); seed++ {
			for _, pytorch := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d/pytorch=%v", conf, seed, pytorch), func(t *testing.T) {
					tr, cfg, _ := recordWorkload(t, conf, 600*mib, seed, steps())
					if pytorch {
						tr = asPyTorch(tr)
					}
					rec, res := recordReplay(t, tr, replay.Options{Config: &cfg, Check: true})
					requireFinalIsSnapshot(t, rec, res)
					var private, inferred int
					for _, e := range rec.Events {
						switch {
						case e.Action == trace.ActionRecordStream && e.Stream >= 0xfffffff000000000:
							private++
						case e.Action == trace.ActionEmptyCache:
							inferred++
						}
					}
					if pytorch {
						require.Positive(t, private, "deferred frees become record_stream on private streams")
						require.Positive(t, inferred, "inferred empty_cache calls become explicit")
					}
					again := requireReplaysExactly(t, rec, &cfg)
					require.Equal(t, res.Devices[0].Stats.NumOOMs, again.Devices[0].Stats.NumOOMs)
					require.Equal(t, res.Devices[0].Stats.NumAllocRetries, again.Devices[0].Stats.NumAllocRetries)
					require.Equal(t, res.Devices[0].Stats.ReservedBytes, again.Devices[0].Stats.ReservedBytes)
				})
			}
		}
	}
}

// OOM policies: the replay's own OOMs, skipped allocations and dropped
// trials are in the recording as the replay did them.
func TestRecordingOfReplayWithOOMs(t *testing.T) {
	src := trialTrace(t, "roberta-large_b8_s256_fp32.mrt")
	for _, pol := range []replay.OOMPolicy{replay.OOMStop, replay.OOMSkip, replay.OOMDropTrial} {
		t.Run(pol.String(), func(t *testing.T) {
			rec, res := recordReplay(t, src, replay.Options{Capacity: 3 << 30, OOM: pol})
			require.NotEmpty(t, res.OOMs)
			ooms := 0
			for _, e := range rec.Events {
				if e.Action == trace.ActionOOM {
					ooms++
				}
			}
			require.Equal(t, len(res.OOMs), ooms)
			require.Equal(t, uint64(3<<30), rec.Header.Devices[0].Capacity)
			requireFinalIsSnapshot(t, rec, res)
			again := requireReplaysExactly(t, rec, nil)
			require.EqualValues(t, ooms, again.Devices[0].Stats.NumOOMs)
		})
	}
}

// The native recording streamed to a writer is the in-memory one, and the
// PyTorch pickle of a trial trace's replay has the end state the trial
// trace lacks and replays exactly too.
func TestRecordingOfReplayFormats(t *testing.T) {
	src := trialTrace(t, "roberta-large_b8_s256_fp32.mrt")
	require.False(t, src.HasFinal)
	cfg := mustParse(t, "expandable_segments:True")
	mem, res := recordReplay(t, src, replay.Options{Config: &cfg})

	var buf bytes.Buffer
	r := src.NewReader()
	rr := replay.NewReplayRecorderTo(&buf, r, replay.ReplayRecordOptions{Name: "test"})
	res2, err := replay.Run(r, replay.Options{Config: &cfg, Recorder: rr})
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	require.Nil(t, rr.Trace())
	require.Equal(t, res.Devices[0].Stats, res2.Devices[0].Stats)
	nr, err := trace.NewNativeReader(&buf, "rec.mrt")
	require.NoError(t, err)
	streamed, err := trace.ReadAll(nr)
	require.NoError(t, err)
	require.Equal(t, mem.Header.AllocatorSettings, streamed.Header.AllocatorSettings)
	require.Equal(t, mem.Header.Notes, streamed.Header.Notes)
	require.Equal(t, mem.Header.Devices, streamed.Header.Devices)
	require.Len(t, streamed.Events, len(mem.Events))
	for i := range mem.Events {
		a, b := mem.Events[i], streamed.Events[i]
		require.Equal(t, mem.Stacks.Frames(a.Stack), streamed.Stacks.Frames(b.Stack), "event %d", i)
		a.Stack, b.Stack = 0, 0
		require.Equal(t, a, b, "event %d", i)
	}
	require.True(t, streamed.HasFinal)
	require.Equal(t, len(mem.Final), len(streamed.Final))
	for i := range mem.Final {
		for j := range mem.Final[i].Blocks {
			a, b := mem.Final[i].Blocks[j], streamed.Final[i].Blocks[j]
			require.Equal(t, mem.Stacks.Frames(a.Stack), streamed.Stacks.Frames(b.Stack))
		}
	}
	requireStacks(t, src, streamed, streamed.Stacks)
	requireReplaysExactly(t, streamed, nil)

	var pk bytes.Buffer
	require.NoError(t, trace.WritePyTorch(&pk, mem))
	back, err := trace.ReadPyTorch(&pk, "rec.pickle")
	require.NoError(t, err)
	require.True(t, back.HasFinal)
	require.NotEmpty(t, back.Final)
	require.Len(t, back.Final, len(mem.Final))
	live := 0
	for _, s := range back.Final {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				live++
				require.NotEmpty(t, back.Stacks.Frames(b.Stack), "live block at %#x has its frames", b.Address)
			}
		}
	}
	require.Equal(t, mem.Header.AllocatorSettings["expandable_segments"], back.Header.AllocatorSettings["expandable_segments"])
	requireStacks(t, src, back, back.Stacks)
	requireReplaysExactly(t, back, nil)
}

// Two devices: each has its own recording, interleaved as replayed.
func TestRecordingOfReplayTwoDevices(t *testing.T) {
	cfg := config.Default()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", AllocatorSettings: cfg.AllocatorSettings()}, Stacks: trace.NewStacks()}
	var recs [2]*replay.Recording
	var allocs [2]*allocator.Allocator
	for d := range allocs {
		card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
		require.NoError(t, err)
		proc, err := card.NewProcess()
		require.NoError(t, err)
		allocs[d], err = allocator.New(proc, cfg, allocator.WithDeviceIndex(d))
		require.NoError(t, err)
		recs[d] = replay.Record(allocs[d], int32(d), func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: int32(d), Capacity: 1 << 30})
	}
	var live [2][]*allocator.Block
	for i := 0; i < 400; i++ {
		d := i % 2
		if i%5 == 4 && len(live[d]) > 0 {
			require.NoError(t, allocs[d].Free(live[d][0]))
			live[d] = live[d][1:]
			continue
		}
		if i%37 == 0 {
			recs[d].Marker(fmt.Sprintf("step %d", i))
		}
		recs[d].SetStack(tr.Stacks.Intern([]trace.Frame{{Filename: "train.py", Line: int64(i), Name: "step"}}))
		b, err := allocs[d].Malloc(uint64(1+i*d)*(3<<20)%(200<<20)+512, 0)
		if err != nil {
			continue
		}
		live[d] = append(live[d], b)
	}
	for d := range allocs {
		tr.Final = append(tr.Final, replay.SnapshotSegments(allocs[d].Snapshot())...)
	}
	tr.HasFinal = true
	rec, res := recordReplay(t, tr, replay.Options{Check: true})
	require.True(t, res.Check.Passed())
	require.Len(t, rec.Header.Devices, 2)
	requireFinalIsSnapshot(t, rec, res)
	requireStacks(t, tr, rec, rec.Stacks)
	markers := func(tr *trace.Trace) (n int) {
		for _, e := range tr.Events {
			if e.Action == trace.ActionMarker {
				n++
			}
		}
		return n
	}
	require.Positive(t, markers(tr))
	require.Equal(t, markers(tr), markers(rec))
	requireReplaysExactly(t, rec, nil)
}

// Recorders passes every call to each recorder, and the replay's inputs to
// those that record them.
func TestRecorders(t *testing.T) {
	require.Nil(t, replay.Recorders())
	require.Nil(t, replay.Recorders(nil, nil))
	src := trialTrace(t, "bert-base_b16_s128_fp16.mrt")
	one := &countingRecorder{}
	require.Same(t, one, replay.Recorders(nil, one))

	two := &countingRecorder{}
	r := src.NewReader()
	rr := replay.NewReplayRecorder(r, replay.ReplayRecordOptions{})
	_, err := replay.Run(r, replay.Options{Recorder: replay.Recorders(one, rr, two)})
	require.NoError(t, err)
	require.NoError(t, rr.Finish())
	require.Equal(t, *one, *two)
	require.EqualValues(t, len(src.Events), one.steps)
	require.Positive(t, one.allocs)
	var trials int
	for _, e := range rr.Trace().Events {
		if e.Action == trace.ActionTrialStart || e.Action == trace.ActionTrialEnd {
			trials++
		}
	}
	require.Equal(t, 2, trials, "inputs reach the recorder through the fan-out")
}

type countingRecorder struct{ attach, restored, allocs, frees, ooms, steps int }

func (c *countingRecorder) Attach(int32, *allocator.Allocator, replay.Process) { c.attach++ }
func (c *countingRecorder) Restored(int32)                                     { c.restored++ }
func (c *countingRecorder) Alloc(int32, int64, *allocator.Block, trace.StackID) {
	c.allocs++
}
func (c *countingRecorder) Free(int32, int64, *allocator.Block, trace.StackID) { c.frees++ }
func (c *countingRecorder) OOM(int32, int64, *allocator.OutOfMemoryError)      { c.ooms++ }
func (c *countingRecorder) Step(int64, *trace.Event)                           { c.steps++ }

// A free that waited on another stream in a PyTorch trace: the replay
// frees the block on a private stream and completes it at its
// free_completed. The recording says so (record_stream, stream_sync), and
// its replay returns the block at the free_completed too, so that the end
// states agree even with no malloc after it.
func TestRecordingOfDeferredFree(t *testing.T) {
	const segY = uint64(0x7f3000000000)
	src := pytorchTrace(
		ev(trace.ActionSegmentAlloc, segX, 20*mib),
		ev(trace.ActionAlloc, segX, 20*mib),
		ev(trace.ActionFreeRequested, segX, 20*mib), // waits on another stream
		ev(trace.ActionSegmentAlloc, segY, 2*mib),
		ev(trace.ActionAlloc, segY, 1000),
		ev(trace.ActionFreeCompleted, segX, 20*mib),
	)
	rec, res := recordReplay(t, src, replay.Options{Check: true})
	require.True(t, res.Check.Passed())
	var actions []trace.Action
	for _, e := range rec.Events {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []trace.Action{trace.ActionSegmentAlloc, trace.ActionAlloc,
		trace.ActionRecordStream, trace.ActionFreeRequested,
		trace.ActionSegmentAlloc, trace.ActionAlloc,
		trace.ActionStreamSync, trace.ActionFreeCompleted}, actions)
	require.Equal(t, rec.Events[2].Stream, rec.Events[6].Stream)
	requireFinalIsSnapshot(t, rec, res)
	require.Equal(t, trace.BlockInactive, rec.Final[0].Blocks[0].State)
	requireReplaysExactly(t, rec, nil)
}

// The record_stream and empty_cache calls reach a Recording from the
// allocator, under its lock and in their place among its entries, whoever
// makes them: here the allocator's own methods, not the Recording's. (They
// were written by the Recording's methods after the allocator's call, so
// another thread's entries could come between; TestRecordStreamDuringA
// ReleaseRecordsInOrder in cmd/libmemreplay is that race.)
func TestRecordingHasTheAllocatorsRequests(t *testing.T) {
	cfg := config.Default()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", AllocatorSettings: cfg.AllocatorSettings(),
		Devices: []trace.Device{{Index: 0, Capacity: 1 << 30}}}, Stacks: trace.NewStacks()}
	card, err := gpu.New(gpu.Options{Capacity: 1 << 30, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	a, err := allocator.New(proc, cfg)
	require.NoError(t, err)
	replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	b, err := a.Malloc(30<<20, 0)
	require.NoError(t, err)
	addr := b.Addr()
	require.NoError(t, a.RecordStream(b, 3))
	require.NoError(t, a.Free(b))
	require.NoError(t, a.EmptyCache())
	var acts []trace.Action
	for _, e := range tr.Events {
		acts = append(acts, e.Action)
	}
	require.Equal(t, []trace.Action{trace.ActionSegmentAlloc, trace.ActionAlloc, trace.ActionRecordStream,
		trace.ActionFreeRequested, trace.ActionFreeCompleted, trace.ActionSegmentFree, trace.ActionEmptyCache}, acts)
	require.Equal(t, addr, tr.Events[2].Addr)
	require.Equal(t, uint64(3), tr.Events[2].Stream)
	tr.Final = replay.SnapshotSegments(a.Snapshot())
	tr.HasFinal = true
	requireReplaysExactly(t, tr, nil)
}

// laterReader is a reader whose stack table and annotations come after
// its events (a speculative replay's, sim/replay/speculate).
type laterReader struct{ trace.Reader }

func (laterReader) AnnotationsLater() bool { return true }
func (laterReader) StacksLater() bool      { return true }

// A native recording writes each stack's frames before its first event:
// on a reader whose stacks come later it fails with a clear error rather
// than writing frames it does not have.
func TestRecordingNativeNeedsStacksAsItGoes(t *testing.T) {
	src := trialTrace(t, "bert-base_b16_s128_fp16.mrt")
	_, err := replay.Prepare(src)
	require.NoError(t, err)
	r := laterReader{src.NewReader()}
	require.False(t, trace.StacksComplete(r))
	require.False(t, trace.AnnotationsComplete(r))
	var buf bytes.Buffer
	rr := replay.NewReplayRecorderTo(&buf, r, replay.ReplayRecordOptions{Name: "test"})
	_, err = replay.Run(r, replay.Options{Recorder: rr})
	require.NoError(t, err)
	require.ErrorContains(t, rr.Finish(), "a native recording needs them as it goes")
	require.Zero(t, buf.Len())
}

package profiler_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// The profiler must stay usable as the replay's recorder.
var _ replay.Recorder = (*profiler.Profiler)(nil)

const MiB = 1 << 20

// rig drives an allocator on a simulated device and reports to a profiler
// the way sim/replay does: Alloc after a successful malloc, Free before the
// free, OOM after a failed malloc, Step after every event.
type rig struct {
	t      *testing.T
	dev    int32
	proc   *gpu.Process
	a      *allocator.Allocator
	p      *profiler.Profiler
	idx    *int64 // shared by the rigs of one profiler
	blocks map[string]*allocator.Block
	stacks map[string]trace.StackID
}

func newAllocator(t testing.TB, capacity uint64, conf string, dev int, opts ...allocator.Option) (*gpu.Process, *allocator.Allocator) {
	t.Helper()
	card, err := gpu.New(gpu.Options{Capacity: capacity, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	a, err := allocator.New(proc, cfg, append([]allocator.Option{allocator.WithDeviceIndex(dev)}, opts...)...)
	require.NoError(t, err)
	return proc, a
}

func newRig(t *testing.T, p *profiler.Profiler, dev int32, capacity uint64, conf string) *rig {
	return newRigWith(t, p, dev, capacity, conf, allocator.WithInvariantChecks())
}

func newRigWith(t *testing.T, p *profiler.Profiler, dev int32, capacity uint64, conf string, opts ...allocator.Option) *rig {
	proc, a := newAllocator(t, capacity, conf, int(dev), opts...)
	p.Attach(dev, a, proc)
	return &rig{t: t, dev: dev, proc: proc, a: a, p: p, idx: new(int64), blocks: map[string]*allocator.Block{}, stacks: map[string]trace.StackID{}}
}

func (r *rig) step() {
	r.p.Step(*r.idx, &trace.Event{Device: r.dev})
	*r.idx++
}

// malloc allocates name with a stack of its own; it reports whether the
// allocation succeeded.
func (r *rig) malloc(name string, size uint64, stack trace.StackID) bool {
	r.t.Helper()
	b, err := r.a.Malloc(size, 0)
	if err != nil {
		var oom *allocator.OutOfMemoryError
		require.True(r.t, errors.As(err, &oom), "%v", err)
		r.p.OOM(r.dev, *r.idx, oom)
		r.step()
		return false
	}
	r.blocks[name], r.stacks[name] = b, stack
	r.p.Alloc(r.dev, *r.idx, b, stack)
	r.step()
	return true
}

func (r *rig) free(name string) {
	r.t.Helper()
	b := r.blocks[name]
	require.NotNil(r.t, b, name)
	r.p.Free(r.dev, *r.idx, b, r.stacks[name])
	require.NoError(r.t, r.a.Free(b))
	delete(r.blocks, name)
	r.step()
}

func (r *rig) emptyCache() {
	require.NoError(r.t, r.a.EmptyCache())
	r.step()
}

func stacksFor(names ...string) *trace.Stacks {
	s := trace.NewStacks()
	for i, n := range names {
		s.Intern([]trace.Frame{
			{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", Filename: "CUDACachingAllocator.cpp"},
			{Name: n, Filename: "train.py", Line: int64(10 + i)},
			{Name: "main", Filename: "train.py", Line: 100},
		})
	}
	return s
}

func siteOf(t *testing.T, sites []profiler.SiteBytes, stack trace.StackID) profiler.SiteBytes {
	t.Helper()
	var out profiler.SiteBytes
	found := false
	for _, s := range sites {
		if s.Stack == stack {
			require.False(t, found, "stack %d twice", stack)
			out, found = s, true
		}
	}
	require.True(t, found, "stack %d missing", stack)
	return out
}

// TestHandComputed drives a small sequence whose figures are worked out by
// hand from the allocator's rules (20 MiB segments below 10 MiB, the request
// rounded to 2 MiB above, split when more than 1 MiB remains).
func TestHandComputed(t *testing.T) {
	p := profiler.New(stacksFor("a", "b", "c", "d", "e"), profiler.Options{})
	r := newRig(t, p, 0, 40*MiB, "")

	r.malloc("A", 6*MiB, 1)                    // 0: segment 1 (20 MiB): A [0,6)
	r.malloc("B", 4*MiB, 2)                    // 1: B [6,10)
	r.malloc("C", 8*MiB, 3)                    // 2: C [10,18), free [18,20); live 18 MiB: first peak
	r.free("B")                                // 3: the capture of the first peak is taken here
	r.malloc("D", 12*MiB, 4)                   // 4: segment 2 (12 MiB); live 26 MiB, reserved 32 MiB: the peak
	r.free("A")                                // 5: capture: free [0,6)+[6,10) merge later; now 4 + 2 MiB free
	require.False(t, r.malloc("E", 16*MiB, 5)) // 6: 16 MiB segment would exceed 40 MiB: OOM
	r.free("C")                                // 7
	r.free("D")                                // 8

	prof := p.Finish()
	require.Len(t, prof.Devices, 1)
	f := prof.Devices[0].Figures
	assert.Equal(t, int64(9), prof.Events)
	assert.Equal(t, uint64(26*MiB), f.PeakLiveBytes)
	assert.Equal(t, int64(4), f.PeakLiveEvent)
	assert.Equal(t, uint64(32*MiB), f.PeakReservedBytes)
	assert.Equal(t, int64(4), f.PeakReservedEvent)
	assert.InDelta(t, 1-26.0/32, f.WasteRatio, 1e-12)
	assert.Equal(t, uint64(32*MiB), f.ReservedBytesAtPeak)
	// At the peak: B's hole [6,10) and the tail [18,20) are free.
	assert.Equal(t, uint64(4*MiB), f.LargestFreeBlockBytesAtPeak)
	assert.Equal(t, uint64(6*MiB), f.FreeBytesAtPeak)
	assert.InDelta(t, 1-4.0/6, f.ExternalFragmentationAtPeak, 1e-12)
	assert.Equal(t, uint64(6*MiB), f.StrandedBytesAtPeak)
	assert.Equal(t, uint64(0), f.InternalWasteBytesAtPeak) // every size is a multiple of 512
	assert.Equal(t, uint64(4), f.Allocs)
	assert.Equal(t, uint64(4), f.Frees)
	assert.Equal(t, uint64(0), f.FinalLiveBytes)
	assert.Equal(t, int64(1), f.OOMs)
	assert.Equal(t, int64(1), f.AllocRetries)
	// Two segments, and E's two failed attempts (before and after
	// releasing the cache, which had no free segment).
	assert.Equal(t, uint64(4), f.DeviceMallocs)
	assert.Equal(t, uint64(0), f.DeviceFrees)
	assert.Equal(t, int64(r.proc.Counters().Total.Time), f.DeviceTimeNS)
	assert.Equal(t, prof.Total.PeakLiveBytes, f.PeakLiveBytes)
	assert.Equal(t, prof.Total.LargestFreeBlockBytesAtPeak, f.LargestFreeBlockBytesAtPeak)

	// The allocator agrees on the peaks.
	st := r.a.Stats()
	assert.Equal(t, uint64(st.AllocatedBytes[allocator.StatAll].Peak), f.PeakLiveBytes)
	assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Peak), f.PeakReservedBytes)
	assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Current), f.FinalReservedBytes)

	// Stranded bytes at the peak: segment 1 holds A (6 MiB) and C (8 MiB)
	// and 6 MiB free, shared 6:8; segment 2 is all D.
	pk := prof.Peak
	require.NotNil(t, pk)
	assert.Same(t, pk, prof.Devices[0].Peak)
	assert.Equal(t, int64(4), pk.Event)
	assert.Equal(t, 2, pk.Segments)
	assert.Equal(t, 2, pk.PinnedSegments)
	const stranded = 6 * MiB
	a := siteOf(t, pk.Sites, 1)
	c := siteOf(t, pk.Sites, 3)
	d := siteOf(t, pk.Sites, 4)
	assert.Equal(t, uint64(6*MiB), a.LiveBytes)
	assert.Equal(t, uint64(stranded*6/14), a.StrandedBytes) // 2696338
	assert.Equal(t, uint64(stranded-stranded*6/14), c.StrandedBytes)
	assert.Equal(t, uint64(3595118), c.StrandedBytes) // floor share + the remainder of 1
	assert.Equal(t, uint64(0), d.StrandedBytes)
	assert.Equal(t, uint64(12*MiB), d.LiveBytes)
	assert.Len(t, pk.Sites, 3)
	assert.Equal(t, trace.StackID(4), pk.Sites[0].Stack, "largest first")

	// The OOM: C and D live (20 MiB), 32 MiB reserved, free [0,10) and
	// [18,20).
	require.Len(t, prof.OOMs, 1)
	o := prof.OOMs[0]
	assert.Equal(t, int64(6), o.Event)
	assert.Equal(t, uint64(16*MiB), o.RequestedBytes)
	assert.Equal(t, uint64(16*MiB), o.AllocBytes)
	assert.Equal(t, uint64(20*MiB), o.LiveBytes)
	assert.Equal(t, uint64(32*MiB), o.ReservedBytes)
	assert.Equal(t, uint64(12*MiB), o.FreeBytes)
	assert.Equal(t, uint64(10*MiB), o.LargestFreeBlockBytes)
	assert.InDelta(t, 1-10.0/12, o.ExternalFragmentation, 1e-12)
	assert.Equal(t, uint64(8*MiB), o.DeviceFreeBytes)
	require.NotNil(t, o.Capture)
	assert.Equal(t, uint64(12*MiB), o.Capture.StrandedBytes)
	assert.Equal(t, uint64(12*MiB), siteOf(t, o.Capture.Sites, 3).StrandedBytes, "C pins segment 1 alone")
	// The most fragmented moment is the end: both segments free, the
	// largest 20 of 32 MiB.
	assert.InDelta(t, 1-20.0/32, f.MaxExternalFragmentation, 1e-12)

	// The site table: frames trimmed of the allocator's own, labelled by
	// the innermost Python frame.
	require.NotEmpty(t, prof.Sites)
	s0 := prof.Sites[0]
	assert.Equal(t, trace.StackID(4), s0.Stack)
	assert.Equal(t, "d (train.py:13)", s0.Label)
	assert.Equal(t, []string{"d (train.py:13)", "main (train.py:100)"}, s0.Frames)
	assert.Equal(t, uint64(12*MiB), s0.LiveBytesAtPeak)
	assert.Equal(t, uint64(1), s0.AllocCount)
	var e *profiler.Site
	for i := range prof.Sites {
		if prof.Sites[i].Stack == 5 {
			e = &prof.Sites[i]
		}
	}
	assert.Nil(t, e, "the failed allocation is no site's allocation")

	// Timeline: one sample per event (9 < 1000), the last one at the end.
	require.Len(t, prof.Timeline, 9)
	assert.Equal(t, int64(1), prof.SampleEvery)
	assert.Equal(t, uint64(26*MiB), prof.Timeline[4].LiveBytes)
	assert.Equal(t, uint64(32*MiB), prof.Timeline[4].ReservedBytes)
	assert.Equal(t, int64(8), prof.Timeline[8].Event)
}

// TestCaptureAcrossEmptyCache: a peak followed by empty_cache before any
// free; the reconstruction undoes the release and reports the state at the
// peak itself.
func TestCaptureAcrossEmptyCache(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r := newRig(t, p, 0, 100*MiB, "")
	r.malloc("S", 1024, 1)  // 0: a small-pool segment (2 MiB)
	r.free("S")             // 1: the small segment is cached
	r.malloc("A", 6*MiB, 2) // 2: a 20 MiB segment; live 6 MiB: the peak, 22 MiB reserved
	r.emptyCache()          // 3: releases the small segment
	r.free("A")             // 4
	prof := p.Finish()
	f := prof.Total
	assert.Equal(t, uint64(6*MiB), f.PeakLiveBytes)
	assert.Equal(t, int64(2), f.PeakLiveEvent)
	assert.Equal(t, uint64(22*MiB), f.ReservedBytesAtPeak)
	assert.Equal(t, uint64(22*MiB), f.PeakReservedBytes)
	pk := prof.Peak
	require.NotNil(t, pk)
	assert.Equal(t, int64(2), pk.Event)
	assert.Equal(t, 2, pk.Segments, "the released small segment is back")
	assert.Equal(t, 1, pk.PinnedSegments)
	assert.Equal(t, uint64(16*MiB), pk.FreeBytes, "14 MiB tail and the 2 MiB small segment")
	assert.Equal(t, uint64(14*MiB), pk.LargestFreeBlockBytes)
	assert.Equal(t, uint64(6*MiB), siteOf(t, pk.Sites, 2).LiveBytes)
	assert.Equal(t, uint64(14*MiB), siteOf(t, pk.Sites, 2).StrandedBytes)
	assert.Equal(t, uint64(20*MiB), f.FinalReservedBytes)
	assert.Equal(t, uint64(20*MiB), uint64(r.a.Stats().ReservedBytes[allocator.StatAll].Current))
}

// TestRamp: a training loop's first iteration, where every activation is a
// new peak and a temporary is freed after each. The state is reconstructed
// once, not at every peak.
func TestRamp(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r := newRigWith(t, p, 0, 1<<40, "")
	const n = 3000
	for i := 0; i < n; i++ {
		r.malloc(fmt.Sprint("act", i), uint64(1+i%7)<<20, 1)
		r.malloc("tmp", 512, 2)
		r.free("tmp")
	}
	for i := 0; i < n; i++ {
		r.free(fmt.Sprint("act", i))
	}
	prof := p.Finish()
	assert.LessOrEqual(t, profiler.Reconstructions(p), 2)
	require.NotNil(t, prof.Peak)
	assert.Equal(t, prof.Total.PeakLiveBytes, prof.Peak.LiveBytes)
	assert.Equal(t, int64(3*n-2), prof.Peak.Event, "the last temporary")
	var live uint64
	for _, s := range prof.Peak.Sites {
		live += s.LiveBytes
	}
	assert.Equal(t, prof.Peak.LiveBytes, live)
}

// TestRestored: restored segments emit no observer entries; reserved comes
// from the allocator's statistics, and restored blocks are live but not
// counted as allocations.
func TestRestored(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r := newRig(t, p, 0, 100*MiB, "")
	// As sim/replay restores: segment by segment, each followed by its
	// live blocks; the last segment has none.
	_, blocks, err := r.a.Restore([]allocator.RestoreSegment{{Size: 20 * MiB, Blocks: []allocator.RestoreBlock{
		{Size: 8 * MiB, Requested: 8 * MiB, Allocated: true}, {Size: 12 * MiB}}}})
	require.NoError(t, err)
	p.Alloc(0, -1, blocks[0][0], 7)
	r.blocks["R"], r.stacks["R"] = blocks[0][0], 7
	_, _, err = r.a.Restore([]allocator.RestoreSegment{{Size: 2 * MiB, Small: true,
		Blocks: []allocator.RestoreBlock{{Size: 2 * MiB}}}})
	require.NoError(t, err)
	r.malloc("A", 4*MiB, 1) // 0: from the restored free 12 MiB
	r.free("R")             // 1
	prof := p.Finish()
	f := prof.Total
	assert.Equal(t, uint64(22*MiB), f.PeakReservedBytes)
	assert.Equal(t, int64(-1), f.PeakReservedEvent, "restored before the first event")
	assert.Equal(t, uint64(12*MiB), f.PeakLiveBytes)
	assert.Equal(t, int64(0), f.PeakLiveEvent)
	assert.Equal(t, uint64(1), f.Allocs)
	assert.Equal(t, uint64(22*MiB), f.ReservedBytesAtPeak)
	assert.Equal(t, uint64(22*MiB), f.FinalReservedBytes)
	require.NotNil(t, prof.Peak)
	assert.Equal(t, uint64(8*MiB), siteOf(t, prof.Peak.Sites, 7).LiveBytes)
	// Stranded: segment 1's 8 MiB free, shared 8:4.
	assert.Equal(t, uint64(8*MiB), prof.Peak.StrandedBytes)
	// 8 MiB * 8/12 rounds down, and the remainder of 1 byte goes to the
	// largest block, R.
	assert.Equal(t, uint64(8*MiB*8/12+1), siteOf(t, prof.Peak.Sites, 7).StrandedBytes)
	assert.Equal(t, uint64(8*MiB*4/12), siteOf(t, prof.Peak.Sites, 1).StrandedBytes)
	for _, s := range prof.Sites {
		if s.Stack == 7 {
			assert.Equal(t, uint64(0), s.AllocCount)
			assert.Equal(t, uint64(8*MiB), s.MaxLiveBytes)
		}
	}
}

// TestMultiDevice: the total peak is the peak of the sum, captured over
// every device at that moment.
func TestMultiDevice(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r0 := newRig(t, p, 0, 100*MiB, "")
	r1 := newRig(t, p, 1, 100*MiB, "")
	r1.idx = r0.idx
	r0.malloc("A", 30*MiB, 1) // 0: device 0 peaks at 30
	r0.free("A")              // 1
	r1.malloc("B", 20*MiB, 2) // 2
	r0.malloc("C", 16*MiB, 3) // 3: total 36 > 30: the total peak
	r1.free("B")              // 4
	prof := p.Finish()
	require.Len(t, prof.Devices, 2)
	assert.Equal(t, uint64(30*MiB), prof.Devices[0].PeakLiveBytes)
	assert.Equal(t, int64(0), prof.Devices[0].PeakLiveEvent)
	assert.Equal(t, uint64(20*MiB), prof.Devices[1].PeakLiveBytes)
	assert.Equal(t, uint64(36*MiB), prof.Total.PeakLiveBytes)
	assert.Equal(t, int64(3), prof.Total.PeakLiveEvent)
	assert.Equal(t, uint64(30*MiB+20*MiB), prof.Total.PeakReservedBytes) // 30 MiB segment cached + 20
	require.NotNil(t, prof.Peak)
	assert.Equal(t, int64(3), prof.Peak.Event)
	b := siteOf(t, prof.Peak.Sites, 2)
	assert.Equal(t, int32(1), b.Device)
	assert.Equal(t, uint64(20*MiB), b.LiveBytes)
	assert.Equal(t, uint64(16*MiB), siteOf(t, prof.Peak.Sites, 3).LiveBytes)
	assert.Equal(t, uint64(14*MiB), prof.Peak.FreeBytes, "device 0's 30 MiB segment holds C and 14 MiB free")
	require.NotEmpty(t, prof.Timeline)
	assert.Len(t, prof.Timeline[len(prof.Timeline)-1].Devices, 2)
}

// TestTimelineThinning: the timeline stays within MaxSamples and keeps the
// maxima of the intervals it merges.
func TestTimelineThinning(t *testing.T) {
	p := profiler.New(nil, profiler.Options{MaxSamples: 16})
	r := newRig(t, p, 0, 1<<30, "")
	// A spike of 64 MiB at event 501, otherwise 1 MiB blocks come and go.
	for i := 0; i < 1000; i++ {
		if i == 500 {
			r.malloc("spike", 64*MiB, 9)
			continue
		}
		if i == 501 {
			r.free("spike")
			continue
		}
		if i%2 == 0 {
			r.malloc("x", MiB, 1)
		} else {
			r.free("x")
		}
	}
	prof := p.Finish()
	assert.LessOrEqual(t, len(prof.Timeline), 16)
	assert.GreaterOrEqual(t, len(prof.Timeline), 8)
	var maxLive uint64
	for i, s := range prof.Timeline {
		maxLive = max(maxLive, s.MaxLiveBytes)
		if i > 0 {
			assert.Greater(t, s.Event, prof.Timeline[i-1].Event)
		}
	}
	assert.Equal(t, uint64(64*MiB), maxLive, "the spike survives thinning")
	assert.Equal(t, uint64(64*MiB), prof.Total.PeakLiveBytes)
	for _, s := range prof.Timeline {
		assert.LessOrEqual(t, s.LiveBytes, uint64(MiB), "instantaneous values are never the spike's")
	}
	assert.Equal(t, int64(999), prof.Timeline[len(prof.Timeline)-1].Event)
}

// TestExpectedEvents: with the length known, the interval is set at once.
func TestExpectedEvents(t *testing.T) {
	p := profiler.New(nil, profiler.Options{MaxSamples: 10, ExpectedEvents: 95})
	r := newRig(t, p, 0, 1<<30, "")
	for i := 0; i < 95; i++ {
		if i%2 == 0 {
			r.malloc("x", MiB, 1)
		} else {
			r.free("x")
		}
	}
	prof := p.Finish()
	assert.Equal(t, int64(12), prof.SampleEvery) // ceil(95/8)
	require.Len(t, prof.Timeline, 8)
	assert.Equal(t, int64(11), prof.Timeline[0].Event)
	assert.Equal(t, int64(94), prof.Timeline[7].Event, "the last, partial interval")
}

// TestExpandable: reserved bytes follow segment_map and segment_unmap.
func TestExpandable(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r := newRig(t, p, 0, 200*MiB, "expandable_segments:True")
	r.malloc("A", 30*MiB, 1)
	r.malloc("B", 30*MiB, 2)
	r.free("A")
	r.emptyCache()
	prof := p.Finish()
	st := r.a.Stats()
	assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Peak), prof.Total.PeakReservedBytes)
	assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Current), prof.Total.FinalReservedBytes)
	assert.Greater(t, prof.Total.DeviceMaps, uint64(0))
	assert.Greater(t, prof.Total.DeviceUnmaps, uint64(0))
	assert.Equal(t, uint64(60*MiB), prof.Total.PeakLiveBytes)
}

func TestFrames(t *testing.T) {
	frames := []trace.Frame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(...)", Filename: "CUDACachingAllocator.cpp"},
		{Name: "at::native::empty_cuda(...)", Filename: "??"},
		{Name: "wrapper_CUDA_empty", Filename: "/x/RegisterCUDA.cpp"},
		{Name: "forward", Filename: "/m/model.py", Line: 42},
		{Name: "_PyEval_EvalFrameDefault", Filename: "ceval.c", Line: 1},
		{Name: "_start", Filename: "??"},
	}
	got := profiler.TrimFrames(frames)
	require.Len(t, got, 2)
	assert.Equal(t, "at::native::empty_cuda(...)", profiler.FormatFrame(got[0]))
	assert.Equal(t, "forward (/m/model.py:42)", profiler.FormatFrame(got[1]))
	assert.Equal(t, "forward (/m/model.py:42)", profiler.SiteLabel(frames))
	assert.Equal(t, "<no stack>", profiler.SiteLabel(nil))
	only := frames[:1]
	assert.Equal(t, only, profiler.TrimFrames(only), "a stack of hidden frames stays whole")

	// A C++-only stack (the autograd engine's thread) is named past the
	// allocation plumbing.
	cpp := []trace.Frame{
		{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"},
		{Name: "at::detail::empty_strided_generic(c10::ArrayRef<long>, c10::ArrayRef<long>)"},
		{Name: "at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>)"},
		{Name: "at::native::new_empty_strided_symint(at::Tensor const&)"},
		{Name: "torch::autograd::utils::clone_obey_contract(at::Tensor const&, at::Tensor const&)"},
		{Name: "void torch::autograd::AccumulateGrad::accumulateGrad<std::function<void (at::Tensor&&)> >(at::Tensor const&)"},
	}
	assert.Equal(t, "torch::autograd::utils::clone_obey_contract(at::Tensor const&, at::Tensor const&)", profiler.SiteLabel(cpp))
	f, ok := profiler.SiteFrame(cpp)
	require.True(t, ok)
	assert.Equal(t, "torch::autograd::utils::clone_obey_contract", profiler.ShortFrame(f))
	assert.Equal(t, "void torch::autograd::AccumulateGrad::accumulateGrad<std::function<void (at::Tensor&&)> >",
		profiler.ShortFrame(cpp[5]))
	assert.Equal(t, "operator()", profiler.ShortFrame(trace.Frame{Name: "operator()"}))
	assert.Equal(t, "forward (model.py:42)", profiler.ShortFrame(frames[4]))
	assert.Equal(t, "convert (module.py:1326)", profiler.ShortFrame(trace.Frame{Name: "convert",
		Filename: `C:\research\.venv\Lib\site-packages\torch\nn\modules\module.py`, Line: 1326}), "a Windows path")
}

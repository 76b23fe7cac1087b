package profiler

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// checkSiteFrames compares the cached site table with SiteLabel and
// TrimFrames on every stack of st, and says how many it checked.
func checkSiteFrames(t *testing.T, st *trace.Stacks) int {
	t.Helper()
	c := newSiteFrames(st)
	for id := 0; id < st.NumStacks(); id++ {
		frames := st.Frames(trace.StackID(id))
		var want []string
		for _, f := range TrimFrames(frames) {
			want = append(want, FormatFrame(f))
		}
		label, got := c.site(trace.StackID(id))
		require.Equal(t, SiteLabel(frames), label, "stack %d", id)
		require.Equal(t, want, got, "stack %d", id)
	}
	return st.NumStacks()
}

// TestSiteFramesMatchTrimFrames: every branch of SiteLabel and TrimFrames,
// with frames shared between stacks so that the cache is hit in each
// role.
func TestSiteFramesMatchTrimFrames(t *testing.T) {
	alloc := trace.Frame{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long)", Filename: "??"}
	unwind := trace.Frame{Name: "torch::unwind::unwind()", Filename: "??"}
	boxing := trace.Frame{Name: "c10::impl::wrap_kernel", Filename: "aten/src/ATen/core/boxing/impl.h", Line: 12}
	empty := trace.Frame{Name: "at::native::empty_cuda(c10::ArrayRef<long>)", Filename: "??"}
	ops := trace.Frame{Name: "at::_ops::add::call(at::Tensor const&)", Filename: "??"}
	kernel := trace.Frame{Name: "at::native::gelu_kernel(at::TensorIteratorBase&)", Filename: "GeluKernel.cu", Line: 40}
	py := trace.Frame{Name: "forward", Filename: "model.py", Line: 7}
	eval := trace.Frame{Name: "_PyEval_EvalFrameDefault", Filename: "ceval.c"}
	st := trace.NewStacks()
	for _, s := range [][]trace.Frame{
		{alloc, empty, kernel, py, eval},
		{alloc, unwind, ops, kernel},
		{alloc, empty, ops},   // only plumbing after the trim: its first frame
		{alloc, unwind, eval}, // all trimmed: kept whole
		{empty, alloc, py},    // allocator frames are trimmed only innermost
		{boxing, kernel, alloc},
		{py},
		{{}},
	} {
		st.Intern(s)
	}
	require.Equal(t, 9, checkSiteFrames(t, st))
}

// TestSiteFramesMatchOnRealSnapshots: the same on every stack of the real
// snapshots.
func TestSiteFramesMatchOnRealSnapshots(t *testing.T) {
	paths := realSnapshotFiles()
	if len(paths) == 0 {
		t.Skip("no real snapshots in ../shared/traces/pytorch or traces/pytorch")
	}
	n := 0
	for _, path := range paths {
		tr, err := trace.ReadPyTorchFile(path)
		require.NoError(t, err)
		n += checkSiteFrames(t, tr.Stacks)
	}
	t.Logf("%d stacks in %d snapshots", n, len(paths))
}

// realSnapshotFiles are the real PyTorch snapshots beside the repository
// (../shared/traces/pytorch) and in its traces/pytorch; none when neither
// is there.
func realSnapshotFiles() []string {
	var paths []string
	for _, dir := range []string{"../../shared/traces/pytorch", "../traces/pytorch"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
		paths = append(paths, m...)
	}
	return paths
}

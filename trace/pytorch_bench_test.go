package trace

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// genPTSnapshot writes a snapshot-like protocol-4 pickle with n trace
// entries the way CPython pickles _snapshot()'s dict: 300 distinct stacks
// of 20 to 50 frames drawn from 600 distinct frame dicts, each stack list
// and frame dict written once and back-referenced through the memo after,
// the keys of a 2.6+ entry (compile_context, user_metadata), addresses as
// 6-byte LONG1 and times as 7-byte LONG1. Entries cycle alloc,
// free_requested, free_completed.
func genPTSnapshot(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	frames := make([]*pshared, 600)
	for i := range frames {
		frames[i] = &pshared{pdict{
			{"name", fmt.Sprintf("at::native::kernel_%d(c10::ArrayRef<long>, c10::TensorOptions const&)", i)},
			{"filename", fmt.Sprintf("/opt/conda/lib/python3.12/site-packages/torch/module_%d.py", i%40)},
			{"line", i * 7 % 3000},
		}}
	}
	stacks := make([]*pshared, 300)
	for i := range stacks {
		l := make(plist, 20+rng.IntN(31))
		for j := range l {
			l[j] = frames[rng.IntN(len(frames))]
		}
		stacks[i] = &pshared{l}
	}
	segs := plist{}
	for i := range 8 {
		addr := int64(0x7f0000000000 + i<<26)
		segs = append(segs, pdict{
			{"device", 0}, {"address", addr}, {"total_size", 20 << 20},
			{"allocated_size", 2 << 20}, {"active_size", 2 << 20}, {"requested_size", 2 << 20},
			{"stream", 0}, {"segment_type", "large"}, {"segment_pool_id", ptuple{0, 0}},
			{"is_expandable", false}, {"frames", stacks[i]},
			{"blocks", plist{
				pdict{{"address", addr}, {"size", 2 << 20}, {"requested_size", 2 << 20}, {"state", "active_allocated"}, {"frames", stacks[i]}},
				pdict{{"address", addr + 2<<20}, {"size", 18 << 20}, {"requested_size", 0}, {"state", "inactive"}, {"frames", plist{}}},
			}},
		})
	}
	actions := []string{"alloc", "free_requested", "free_completed"}
	w := newPickleWriter(false)
	w.op(opEMPTY_DICT)
	w.put()
	w.op(opMARK)
	w.value("segments")
	w.value(segs)
	w.value("device_traces")
	w.op(opEMPTY_LIST)
	w.put()
	w.op(opEMPTY_LIST)
	w.put()
	var stack *pshared
	w.batches(n, func(i int) {
		if i%3 == 0 {
			stack = stacks[rng.IntN(len(stacks))]
		}
		w.value(pdict{
			{"action", actions[i%3]},
			{"addr", int64(0x7f0000000000 + (i/3%4096)<<12)},
			{"size", 512 + (i/3%1000)*4096},
			{"stream", 0},
			{"time_us", int64(1783874495854988 + i)},
			{"compile_context", "N/A"},
			{"user_metadata", ""},
			{"frames", stack},
		})
	}, opAPPEND, opAPPENDS)
	w.op(opAPPEND)
	w.value("allocator_settings")
	w.value(pdict{{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", -1}, {"expandable_segments", false}})
	w.op(opSETITEMS)
	return w.finish()
}

func TestGenPTSnapshot(t *testing.T) {
	tr, err := readPT(t, genPTSnapshot(3000))
	require.NoError(t, err)
	checkPTTrace(t, tr)
	assert.Len(t, tr.Events, 3000)
	assert.Equal(t, map[Action]int{ActionAlloc: 1000, ActionFreeRequested: 1000, ActionFreeCompleted: 1000}, countPTActions(tr))
	assert.Len(t, tr.Final, 8)
	assert.LessOrEqual(t, tr.Stacks.NumStacks(), 301)
	assert.Equal(t, tr.Events[0].Stack, tr.Events[2].Stack)
	n := len(tr.Stacks.Frames(tr.Events[0].Stack))
	assert.True(t, n >= 20 && n <= 50, "%d frames", n)
}

// BenchmarkReadPyTorch measures the whole import (read, unpickle,
// convert) of generated snapshots; entries/s is the figure the issue asks
// to be at least 1e6.
func BenchmarkReadPyTorch(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		data := genPTSnapshot(n)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			benchReadPyTorch(b, data, n)
		})
	}
}

// BenchmarkReadPyTorchRealTraining imports the largest real snapshot
// (3 MB, 19136 entries with 12831 distinct frame lists: real files share
// frame dicts more than whole lists; and 2 external_annotations, so 19138
// events).
func BenchmarkReadPyTorchRealTraining(b *testing.B) {
	needSharedPyTorch(b)
	data, err := os.ReadFile(filepath.Join(sharedPyTorchDir, "cs336_wedsonlin_medium_128_training.pickle"))
	require.NoError(b, err)
	benchReadPyTorchEvents(b, data, 19136, 19138)
}

func benchReadPyTorch(b *testing.B, data []byte, entries int) {
	benchReadPyTorchEvents(b, data, entries, entries)
}

// benchReadPyTorchEvents: entries trace entries that import as events
// events (annotations add theirs).
func benchReadPyTorchEvents(b *testing.B, data []byte, entries, events int) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		tr, err := ReadPyTorch(bytes.NewReader(data), "bench.pickle")
		if err != nil {
			b.Fatal(err)
		}
		if len(tr.Events) != events {
			b.Fatalf("%d events, want %d", len(tr.Events), events)
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkUnpickle is the decoding half alone.
func BenchmarkUnpickle(b *testing.B) {
	data := genPTSnapshot(1_000_000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unpickle(data, "bench.pickle"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1e6*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkImportFile imports the snapshot file named by
// $MEMREPLAY_BENCH_PICKLE from disk, as trace.Open does (ReadPyTorchPacked:
// streamed, the events packed; bench/import.sh
// builds one of a million entries and times Python's pickle.load of the
// same file beside it); skipped when unset.
func BenchmarkImportFile(b *testing.B) {
	path := os.Getenv("MEMREPLAY_BENCH_PICKLE")
	if path == "" {
		b.Skip("MEMREPLAY_BENCH_PICKLE is not set")
	}
	fi, err := os.Stat(path)
	require.NoError(b, err)
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	entries := int64(0)
	for b.Loop() {
		p, err := ReadPyTorchPacked(path)
		if err != nil {
			b.Fatal(err)
		}
		entries = p.Events.Len()
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testdataSnapshot is a copy of the shared cs336_silmont2000_mem_snapshot
// (MIT, see testdata/NOTICE.md), so these tests run in any clone.
const testdataSnapshot = "testdata/pytorch_cs336_silmont2000_mem_snapshot.pickle"

// sharedPyTorchDir holds the real snapshots (../shared/traces/pytorch from
// the repository root); tests that need them skip without it.
var sharedPyTorchDir = filepath.Join("..", "..", "shared", "traces", "pytorch")

func needSharedPyTorch(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(sharedPyTorchDir); err != nil {
		t.Skip("../shared/traces/pytorch not present: the real snapshots live outside the repository; " + err.Error())
	}
}

func readPT(t testing.TB, data []byte) (*Trace, error) {
	t.Helper()
	return ReadPyTorch(bytes.NewReader(data), "test.pickle")
}

func mustReadPT(t testing.TB, v any, cpp bool) *Trace {
	t.Helper()
	tr, err := readPT(t, encodePickle(v, cpp))
	require.NoError(t, err)
	return tr
}

func countPTActions(tr *Trace) map[Action]int {
	m := map[Action]int{}
	for _, e := range tr.Events {
		m[e.Action]++
	}
	return m
}

func countPTStates(tr *Trace) (blocks int, m map[BlockState]int) {
	m = map[BlockState]int{}
	for _, s := range tr.Final {
		for _, b := range s.Blocks {
			m[b.State]++
			blocks++
		}
	}
	return blocks, m
}

func ptDeviceIndices(tr *Trace) []int32 {
	var d []int32
	for _, dev := range tr.Header.Devices {
		d = append(d, dev.Index)
	}
	return d
}

// checkPTTrace: blocks tile their segment and every stack ID is valid.
func checkPTTrace(t *testing.T, tr *Trace) {
	t.Helper()
	n := StackID(tr.Stacks.NumStacks())
	for i, e := range tr.Events {
		require.Less(t, e.Stack, n, "event %d", i)
		require.NotEqual(t, ActionInvalid, e.Action, "event %d", i)
	}
	for i, s := range tr.Final {
		require.Less(t, s.Stack, n, "segment %d", i)
		at := s.Address
		for j, b := range s.Blocks {
			require.Less(t, b.Stack, n, "segment %d block %d", i, j)
			require.Equal(t, at, b.Address, "segment %d block %d", i, j)
			at += b.Size
		}
		require.Equal(t, s.Address+s.TotalSize, at, "segment %d: blocks do not cover it", i)
	}
}

// The expected figures were read from the same files with python3's
// pickle.load when this test was written; the test itself needs no python.
func TestReadPyTorchRealFiles(t *testing.T) {
	needSharedPyTorch(t)
	for _, tc := range []struct {
		file           string
		segments       int
		blocks         int
		actions        map[Action]int
		states         map[BlockState]int
		devices        []int32
		stacks, frames int
		lastEvent      Event // without Stack
		lastBlock      Block // without Stack
	}{
		{"cs336_silmont2000_mem_snapshot.pickle", 9, 20,
			map[Action]int{ActionSegmentAlloc: 9, ActionAlloc: 36, ActionFreeRequested: 26, ActionFreeCompleted: 26},
			map[BlockState]int{BlockInactive: 10, BlockAllocated: 10}, []int32{0}, 43, 245,
			Event{Action: ActionFreeCompleted, Addr: 139780117496320, Size: 4, TimeUS: 1772688693001479},
			Block{Address: 139781782765568, Size: 1966080, State: BlockInactive}},
		{"cs336_silmont2000_memory_forward_bf16_128.pickle", 43, 178,
			// Two external_annotations, beside the events (annotations).
			map[Action]int{ActionAlloc: 937, ActionFreeRequested: 937, ActionFreeCompleted: 937},
			map[BlockState]int{BlockInactive: 41, BlockAllocated: 137}, []int32{0}, 134, 363,
			Event{Action: ActionFreeCompleted, Addr: 140587634262016, Size: 10240000, TimeUS: 1772552894628154},
			Block{Address: 140589632847872, Size: 2097152, RequestedSize: 1179648, State: BlockInactive}},
		{"cs336_silmont2000_memory_forward_fp32_128.pickle", 29, 164,
			map[Action]int{ActionAlloc: 681, ActionFreeRequested: 681, ActionFreeCompleted: 681},
			map[BlockState]int{BlockInactive: 27, BlockAllocated: 137}, []int32{0}, 106, 346,
			Event{Action: ActionFreeCompleted, Addr: 139991372005376, Size: 20480000, TimeUS: 1772552953894721},
			Block{Address: 139993504808960, Size: 2097152, State: BlockInactive}},
		{"cs336_wedsonlin_medium_128_inference.pickle", 98, 230,
			map[Action]int{ActionAlloc: 1280, ActionFreeRequested: 1280, ActionFreeCompleted: 1280},
			map[BlockState]int{BlockInactive: 7, BlockAllocated: 223}, []int32{0}, 89, 243,
			Event{Action: ActionFreeCompleted, Addr: 30140268544, Size: 20480000, TimeUS: 1783874041897772},
			Block{Address: 32046710784, Size: 6160384, RequestedSize: 2097152, State: BlockInactive}},
		{"cs336_wedsonlin_medium_128_training.pickle", 377, 918,
			map[Action]int{ActionAlloc: 6526, ActionFreeRequested: 6305, ActionFreeCompleted: 6305},
			map[BlockState]int{BlockInactive: 33, BlockAllocated: 885}, []int32{0}, 171, 511,
			Event{Action: ActionFreeCompleted, Addr: 37341888512, Size: 40960000, TimeUS: 1783874496022988},
			Block{Address: 37593546752, Size: 41943040, RequestedSize: 40960000, State: BlockInactive}},
		{"flexgen_opt1.3b_oom_snapshot_legacy.pickle", 176, 463,
			map[Action]int{ActionMarker: 1},
			map[BlockState]int{BlockInactive: 3, BlockAllocated: 460}, []int32{0}, 4, 12,
			Event{Action: ActionMarker, Size: 11840159744, Label: "snapshot"},
			Block{Address: 140049252237312, Size: 1163264, State: BlockInactive}},
		{"flexgen_opt1.3b_snapshot_legacy.pickle", 266, 791,
			map[Action]int{ActionFreeCompleted: 1},
			map[BlockState]int{BlockInactive: 76, BlockAllocated: 715}, []int32{0}, 35, 49,
			Event{Action: ActionFreeCompleted, Addr: 139686137346048, Size: 8896512},
			Block{Address: 139692251316224, Size: 1802240, RequestedSize: 1112064, State: BlockInactive}},
		{"sketchkv2_my_snapshot.pickle", 259, 868,
			map[Action]int{ActionFreeCompleted: 1},
			map[BlockState]int{BlockInactive: 29, BlockAllocated: 839}, []int32{0}, 18, 35,
			Event{Action: ActionFreeCompleted, Addr: 139937209607680, Size: 8, TimeUS: 1729931410850299},
			Block{Address: 139937382924288, Size: 33554432, RequestedSize: 32768000, State: BlockInactive}},
		{"verl_megatron_vllm_qwen2_mem.pickle", 127, 638,
			map[Action]int{},
			map[BlockState]int{BlockInactive: 95, BlockAllocated: 534, BlockPendingFree: 9}, []int32{0}, 32, 248,
			Event{},
			Block{Address: 139590855819264, Size: 90177536, RequestedSize: 89488896, State: BlockAllocated}},
		{"zijiandu_attention_memory_segments_only.pickle", 499, 2974,
			map[Action]int{},
			map[BlockState]int{BlockInactive: 450, BlockAllocated: 2524}, []int32{0, 1}, 10, 139,
			Event{},
			Block{Address: 139611535834624, Size: 512, RequestedSize: 512, State: BlockAllocated}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(sharedPyTorchDir, tc.file)
			tr, err := ReadPyTorchFile(path)
			require.NoError(t, err)
			checkPTTrace(t, tr)
			assert.Equal(t, "pytorch-snapshot", tr.Header.Source)
			assert.Equal(t, path, tr.Header.SourceFile)
			assert.Equal(t, PyTorchImporterVersion, tr.Header.Tools["memreplay-importer"])
			assert.True(t, tr.HasFinal)
			assert.Nil(t, tr.Initial)
			assert.Len(t, tr.Final, tc.segments)
			blocks, states := countPTStates(tr)
			assert.Equal(t, tc.blocks, blocks)
			assert.Equal(t, tc.states, states)
			assert.Equal(t, tc.actions, countPTActions(tr))
			assert.Equal(t, tc.devices, ptDeviceIndices(tr))
			assert.Equal(t, tc.stacks, tr.Stacks.NumStacks())
			assert.Equal(t, tc.frames, tr.Stacks.NumFrames())
			if len(tr.Events) > 0 {
				last := tr.Events[len(tr.Events)-1]
				last.Stack = 0
				assert.Equal(t, tc.lastEvent, last)
			}
			seg := tr.Final[len(tr.Final)-1]
			lb := seg.Blocks[len(seg.Blocks)-1]
			lb.Stack = 0
			assert.Equal(t, tc.lastBlock, lb)
		})
	}
}

// Details of the small complete trace, from the copy in testdata.
func TestReadPyTorchTestdata(t *testing.T) {
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	checkPTTrace(t, tr)
	require.Len(t, tr.Events, 97)
	require.Len(t, tr.Final, 9)
	assert.Equal(t, []Device{{Index: 0}}, tr.Header.Devices)
	assert.Empty(t, tr.Header.Notes) // external_annotations is an empty list here

	e := tr.Events[0]
	assert.Equal(t, Event{Action: ActionSegmentAlloc, Addr: 139781763760128, Size: 20971520, TimeUS: 1772688692031317, Stack: e.Stack}, e)
	frames := tr.Stacks.Frames(e.Stack)
	require.Len(t, frames, 41)
	assert.Equal(t, Frame{Filename: "??", Name: "torch::unwind::unwind()"}, frames[0])
	assert.Equal(t, Frame{Filename: "/root/autodl-tmp/assignment2-systems/cs336_systems/trace_peak_memory.py", Line: 98, Name: "<module>"}, frames[40])

	// free_requested and free_completed of one block.
	assert.Equal(t, ActionFreeRequested, tr.Events[9].Action)
	assert.Equal(t, ActionFreeCompleted, tr.Events[10].Action)
	assert.Equal(t, uint64(139780784390144), tr.Events[9].Addr)
	assert.Equal(t, tr.Events[9].Addr, tr.Events[10].Addr)
	assert.Equal(t, uint64(536870912), tr.Events[10].Size)
	assert.Len(t, tr.Stacks.Frames(tr.Events[10].Stack), 26)

	s := tr.Final[0]
	assert.Equal(t, int32(0), s.Device)
	assert.Equal(t, uint64(139777059848192), s.Address)
	assert.Equal(t, uint64(536870912), s.TotalSize)
	assert.Equal(t, "large", s.Pool)
	assert.Equal(t, [2]int64{0, 0}, s.PoolID)
	assert.False(t, s.Expandable)
	assert.Len(t, tr.Stacks.Frames(s.Stack), 32)
	assert.Equal(t, []Block{{Address: 139777059848192, Size: 536870912, RequestedSize: 536870912, State: BlockInactive}}, s.Blocks)

	roundup := map[string]any{}
	for k := 1; k <= 32768; k *= 2 {
		roundup[strconv.Itoa(k)] = int64(0)
	}
	assert.Equal(t, map[string]any{
		"PYTORCH_CUDA_ALLOC_CONF":       "",
		"max_split_size":                int64(-1),
		"garbage_collection_threshold":  0.0,
		"expandable_segments":           false,
		"pinned_num_register_threads":   int64(1),
		"release_lock_on_cudamalloc":    false,
		"pinned_use_cuda_host_register": false,
		"roundup_power2_divisions":      roundup,
	}, tr.Header.AllocatorSettings)

	// The reader streams what was read.
	got, err := ReadAll(tr.NewReader())
	require.NoError(t, err)
	assert.Equal(t, tr.Events, got.Events)
}

func TestReadPyTorchLegacy(t *testing.T) {
	needSharedPyTorch(t)
	tr, err := ReadPyTorchFile(filepath.Join(sharedPyTorchDir, "flexgen_opt1.3b_snapshot_legacy.pickle"))
	require.NoError(t, err)
	assert.Contains(t, tr.Header.Notes, "PyTorch 2.0 snapshot: block addresses computed from segment addresses and block sizes, block stacks taken from history[0]")
	assert.Nil(t, tr.Header.AllocatorSettings)
	// Segment 8's first block merged four allocations; history[0] is the
	// one at the block's own address.
	b := tr.Final[8].Blocks[0]
	assert.Equal(t, uint64(139686127337472), b.Address)
	assert.Equal(t, uint64(20971520), b.Size)
	assert.Equal(t, uint64(8896512), b.RequestedSize)
	f := tr.Stacks.Frames(b.Stack)
	require.Len(t, f, 10)
	assert.Equal(t, Frame{Filename: "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py", Line: 195, Name: "allocate"}, f[0])
	// Legacy segments lack segment_pool_id, is_expandable and frames.
	assert.Equal(t, Segment{Device: 0, Address: 139684650942464, TotalSize: tr.Final[0].TotalSize, Pool: "large", Blocks: tr.Final[0].Blocks}, tr.Final[0])
	f = tr.Stacks.Frames(tr.Final[0].Blocks[0].Stack)
	require.NotEmpty(t, f)
	assert.Equal(t, Frame{Filename: "/home/dingyiran/FlexGen/flexgen/compression.py", Line: 177, Name: "decompress"}, f[0])
}

func TestReadPyTorchNotes(t *testing.T) {
	needSharedPyTorch(t)
	tr, err := ReadPyTorchFile(filepath.Join(sharedPyTorchDir, "cs336_wedsonlin_medium_128_training.pickle"))
	require.NoError(t, err)
	assert.Empty(t, tr.Header.Notes) // its two external_annotations are imported
	assert.Equal(t, false, tr.Header.AllocatorSettings["graph_capture_record_stream_reuse"])
}

// cppStylePickle is a snapshot written opcode by opcode the way PyTorch's
// C++ pickler (torch::cuda::_memory_snapshot_pickled) writes one at
// protocol 2: dicts and lists always as MARK ... SETITEMS/APPENDS, strings
// as BINUNICODE memoised with BINPUT and reused with BINGET, ints beyond
// int32 as an 8-byte LONG1.
func cppStylePickle() []byte {
	var b []byte
	op := func(o ...byte) { b = append(b, o...) }
	memo := 0
	str := func(s string) { // BINUNICODE s; BINPUT n
		op(opBINUNICODE)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
		op(opBINPUT, byte(memo))
		memo++
	}
	long8 := func(v int64) {
		op(opLONG1, 8)
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	binint := func(v int32) {
		op(opBININT)
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	const addr, stream = 0x7f1234500000, 0x55d0c0ffee00

	op(opPROTO, 2, opEMPTY_DICT, opMARK)
	str("segments") // memo 0
	op(opEMPTY_LIST, opMARK, opEMPTY_DICT, opMARK)
	str("device") // 1
	op(opBININT1, 0)
	str("address") // 2
	long8(addr)
	str("total_size") // 3
	binint(2097152)
	str("stream") // 4
	long8(stream)
	str("segment_type") // 5
	str("large")        // 6
	str("segment_pool_id")
	op(opBININT1, 0, opBININT1, 1, opTUPLE2)
	str("is_expandable") // 8
	op(opNEWTRUE)
	str("frames") // 9
	op(opEMPTY_LIST, opMARK, opAPPENDS)
	str("blocks") // 10
	op(opEMPTY_LIST, opMARK, opEMPTY_DICT, opMARK)
	op(opBINGET, 2)
	long8(addr)
	str("size") // 11
	binint(2097152)
	str("requested_size") // 12
	binint(2000000)
	str("state")               // 13
	str("active_pending_free") // 14
	op(opBINGET, 9, opEMPTY_LIST, opMARK, opAPPENDS)
	op(opSETITEMS, opAPPENDS) // block, blocks
	op(opSETITEMS, opAPPENDS) // segment, segments

	str("device_traces") // 15
	op(opEMPTY_LIST, opMARK, opEMPTY_LIST, opMARK)
	op(opEMPTY_DICT, opMARK)
	str("action")      // 16
	str("segment_map") // 17
	str("addr")        // 18
	long8(addr)
	op(opBINGET, 11)
	binint(2097152)
	op(opBINGET, 4)
	long8(stream)
	str("time_us") // 19
	long8(1772688692031317)
	op(opSETITEMS)
	op(opEMPTY_DICT, opMARK)
	op(opBINGET, 16)
	str("alloc") // 20
	op(opBINGET, 18)
	long8(addr)
	op(opBINGET, 11)
	binint(2000000)
	op(opBINGET, 4)
	long8(stream)
	op(opBINGET, 19)
	long8(1772688692031318)
	op(opBINGET, 9, opEMPTY_LIST, opMARK, opEMPTY_DICT, opMARK)
	str("filename")
	str("train.py")
	str("line")
	op(opBININT1, 7)
	str("name")
	str("step")
	op(opSETITEMS, opAPPENDS)
	op(opSETITEMS)
	op(opAPPENDS, opAPPENDS) // device 0's list, device_traces

	str("allocator_settings")
	op(opEMPTY_DICT, opMARK)
	str("expandable_segments")
	op(opNEWTRUE)
	str("garbage_collection_threshold")
	op(opBINFLOAT)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(0.6))
	str("max_split_size")
	binint(-1)
	op(opSETITEMS)
	op(opSETITEMS, opSTOP)
	return b
}

func TestReadPyTorchProtocol2CPP(t *testing.T) {
	tr, err := readPT(t, cppStylePickle())
	require.NoError(t, err)
	checkPTTrace(t, tr)
	require.Len(t, tr.Final, 1)
	s := tr.Final[0]
	assert.Equal(t, uint64(0x7f1234500000), s.Address)
	assert.Equal(t, uint64(0x55d0c0ffee00), s.Stream)
	assert.Equal(t, [2]int64{0, 1}, s.PoolID)
	assert.True(t, s.Expandable)
	assert.Equal(t, []Block{{Address: 0x7f1234500000, Size: 2097152, RequestedSize: 2000000, State: BlockPendingFree}}, s.Blocks)
	require.Len(t, tr.Events, 2)
	assert.Equal(t, Event{Action: ActionSegmentMap, Addr: 0x7f1234500000, Size: 2097152, Stream: 0x55d0c0ffee00, TimeUS: 1772688692031317}, tr.Events[0])
	e := tr.Events[1]
	assert.Equal(t, ActionAlloc, e.Action)
	assert.Equal(t, uint64(2000000), e.Size)
	assert.Equal(t, []Frame{{Filename: "train.py", Line: 7, Name: "step"}}, tr.Stacks.Frames(e.Stack))
	assert.Equal(t, map[string]any{"expandable_segments": true, "garbage_collection_threshold": 0.6, "max_split_size": int64(-1)}, tr.Header.AllocatorSettings)
}

// Both picklers' styles of the same snapshot give the same trace.
func TestReadPyTorchStylesAgree(t *testing.T) {
	a := mustReadPT(t, smallPTSnapshot(), false)
	b := mustReadPT(t, smallPTSnapshot(), true)
	checkPTTrace(t, a)
	assert.Equal(t, a, b)
	// The frame list shared by the segment, its block and two events is one
	// stack.
	assert.Equal(t, 2, a.Stacks.NumStacks())
	assert.Equal(t, StackID(1), a.Final[0].Stack)
	assert.Equal(t, StackID(1), a.Events[1].Stack)
	assert.Equal(t, map[string]any{"1": int64(0), "2": int64(4)}, a.Header.AllocatorSettings["roundup_power2_divisions"])
}

// torch.cuda.memory_snapshot() returns only the segment list.
func TestReadPyTorchBareSegmentList(t *testing.T) {
	segs := smallPTSnapshot().(pdict)[0].v
	tr := mustReadPT(t, segs, false)
	checkPTTrace(t, tr)
	assert.True(t, tr.HasFinal)
	assert.Empty(t, tr.Events)
	require.Len(t, tr.Final, 1)
	assert.Len(t, tr.Final[0].Blocks, 2)
	assert.Equal(t, []Device{{Index: 0}}, tr.Header.Devices)
	assert.Equal(t, []string{"bare segment list (torch.cuda.memory_snapshot()): state only, no trace"}, tr.Header.Notes)
	assert.Nil(t, tr.Header.AllocatorSettings)
}

func ptEntry(action string, addr, size any, more ...pkv) pdict {
	d := pdict{{"action", action}}
	if addr != nil {
		d = append(d, pkv{"addr", addr})
	}
	if size != nil {
		d = append(d, pkv{"size", size})
	}
	return append(d, more...)
}

func TestReadPyTorchEvents(t *testing.T) {
	annot := plist{pdict{{"name", "START"}, {"filename", "optimizer.step"}, {"line", 0}}}
	snap := pdict{
		{"device_traces", plist{
			plist{
				ptEntry("alloc", 4096, 100, pkv{"stream", -1}, pkv{"time_us", 5}),
				ptEntry("oom", nil, 1<<30, pkv{"device_free", 12345}, pkv{"stream", 0}),
				ptEntry("snapshot", 0, 777),
				ptEntry("user_defined", 0, 0, pkv{"frames", annot}),
				ptEntry("annotate", nil, nil),
			},
			plist{},
			plist{
				ptEntry("segment_unmap", uint64(1<<63+4096), 2<<20, pkv{"compile_context", "N/A"}, pkv{"user_metadata", ""}, pkv{"pool_id", ptuple{0, 0}}),
				ptEntry("free_requested", 4096, 100), ptEntry("free_completed", 4096, 100),
				ptEntry("segment_alloc", 0, 0), ptEntry("segment_free", 0, 0), ptEntry("segment_map", 0, 0),
			},
		}},
		{"something_new", plist{praw{opNONE}}},
	}
	tr := mustReadPT(t, snap, false)
	checkPTTrace(t, tr)
	assert.False(t, tr.HasFinal)
	assert.Equal(t, []Device{{Index: 0}, {Index: 1}, {Index: 2}}, tr.Header.Devices)
	require.Len(t, tr.Events, 11)
	stack := tr.Events[3].Stack
	assert.Equal(t, []Event{
		{Action: ActionAlloc, Addr: 4096, Size: 100, Stream: math.MaxUint64, TimeUS: 5},
		{Action: ActionOOM, Size: 1 << 30, DeviceFree: 12345},
		{Action: ActionMarker, Size: 777, Label: "snapshot"},
		{Action: ActionMarker, Label: "optimizer.step", Stack: stack},
		{Action: ActionMarker, Label: "annotate"},
		{Action: ActionSegmentUnmap, Device: 2, Addr: 1<<63 + 4096, Size: 2 << 20},
		{Action: ActionFreeRequested, Device: 2, Addr: 4096, Size: 100},
		{Action: ActionFreeCompleted, Device: 2, Addr: 4096, Size: 100},
		{Action: ActionSegmentAlloc, Device: 2},
		{Action: ActionSegmentFree, Device: 2},
		{Action: ActionSegmentMap, Device: 2},
	}, tr.Events)
	assert.Equal(t, []Frame{{Filename: "optimizer.step", Name: "START"}}, tr.Stacks.Frames(stack))
}

func TestReadPyTorchAddresses(t *testing.T) {
	// PyTorch writes pointers as int64: an 8-byte LONG1 with the top bit set
	// (negative) is the same 64 bits as the 9-byte unsigned form.
	for _, addr := range []any{int64(-4096), uint64(math.MaxUint64 - 4095)} {
		for _, cpp := range []bool{false, true} {
			segs := plist{pdict{{"device", 0}, {"address", addr}, {"total_size", 4096}, {"stream", int64(-2)},
				{"blocks", plist{pdict{{"size", 4096}, {"state", "active_awaiting_free"}}}}}}
			tr := mustReadPT(t, segs, cpp)
			checkPTTrace(t, tr)
			assert.Equal(t, uint64(math.MaxUint64-4095), tr.Final[0].Address)
			assert.Equal(t, uint64(math.MaxUint64-4095), tr.Final[0].Blocks[0].Address)
			assert.Equal(t, uint64(math.MaxUint64-1), tr.Final[0].Stream)
			assert.Equal(t, BlockPendingFree, tr.Final[0].Blocks[0].State)
		}
	}
}

func TestReadPyTorchSettings(t *testing.T) {
	tr := mustReadPT(t, pdict{{"allocator_settings", pdict{
		{"PYTORCH_ALLOC_CONF", "expandable_segments:True"},
		{"garbage_collection_threshold", 1}, // an int where a float is due
		{"future_int", 3}, {"future_dict", pdict{{"a", pdict{{"b", true}}}}},
		{"future_list", plist{1}}, {"future_none", nil}, {"future_big", uint64(1 << 63)},
	}}}, false)
	assert.Equal(t, map[string]any{
		"PYTORCH_ALLOC_CONF":           "expandable_segments:True",
		"garbage_collection_threshold": 1.0,
		"future_int":                   int64(3),
		"future_dict":                  map[string]any{"a": map[string]any{"b": true}},
	}, tr.Header.AllocatorSettings)
	assert.Equal(t, []string{
		"allocator_settings.future_list of type list skipped",
		"allocator_settings.future_none of type NoneType skipped",
		"allocator_settings.future_big of type int skipped",
	}, tr.Header.Notes)
	assert.Empty(t, tr.Final)
	assert.Empty(t, tr.Events)
	assert.Empty(t, tr.Header.Devices)
}

func TestReadPyTorchErrors(t *testing.T) {
	seg := func(kv ...pkv) pdict {
		d := pdict{{"device", 0}, {"address", 1 << 20}, {"total_size", 512}}
		d = append(d, kv...)
		return append(d, pkv{"blocks", plist{pdict{{"size", 512}, {"state", "inactive"}}}})
	}
	block := func(kv ...pkv) pdict {
		return pdict{{"device", 0}, {"address", 1 << 20}, {"total_size", 512}, {"blocks", plist{pdict(kv)}}}
	}
	traces := func(entries ...any) pdict {
		return pdict{{"device_traces", plist{plist{ptEntry("alloc", 1, 1)}, plist(entries)}}}
	}
	for _, tc := range []struct {
		name  string
		in    any
		event int64
		msg   string
	}{
		{"top level", 5, -1, "top level: expected dict or list, got int"},
		{"segments type", pdict{{"segments", pdict{}}}, -1, "segments: expected list, got dict"},
		{"segment type", plist{ptuple{}}, -1, "segments[0]: expected dict, got tuple"},
		{"segment size type", pdict{{"segments", plist{seg(pkv{"total_size", "big"})}}}, -1, "segments[0].total_size: expected int, got str"},
		{"segment negative size", pdict{{"segments", plist{seg(pkv{"total_size", -512})}}}, -1, "segments[0].total_size: negative size -512"},
		{"segment device", plist{seg(pkv{"device", -1})}, -1, "segments[0].device: device -1 out of range"},
		{"segment missing address", plist{pdict{{"device", 0}, {"total_size", 1}, {"blocks", plist{}}}}, -1, `segments[0]: missing key "address"`},
		{"segment pool id", plist{seg(pkv{"segment_pool_id", ptuple{0}})}, -1, "segments[0].segment_pool_id: expected 2 ints, got 1 items"},
		{"segment pool id type", plist{seg(pkv{"segment_pool_id", ptuple{0, "x"}})}, -1, "segments[0].segment_pool_id[1]: expected int, got str"},
		{"segment expandable", plist{seg(pkv{"is_expandable", 1})}, -1, "segments[0].is_expandable: expected bool, got int"},
		{"segment frames", plist{seg(pkv{"frames", plist{5}})}, -1, "segments[0].frames[0]: expected dict, got int"},
		{"frame line", plist{seg(pkv{"frames", plist{pdict{{"line", "7"}}}})}, -1, "segments[0].frames[0].line: expected int, got str"},
		{"blocks type", plist{pdict{{"device", 0}, {"address", 1}, {"total_size", 1}, {"blocks", 3}}}, -1, "segments[0].blocks: expected list, got int"},
		{"block state", plist{block(pkv{"size", 512}, pkv{"state", "active_free"})}, -1, `segments[0].blocks[0].state: unknown block state "active_free"`},
		{"block state type", plist{block(pkv{"size", 512}, pkv{"state", 1})}, -1, `segments[0].blocks[0].state: expected str, got int`},
		{"block size", plist{block(pkv{"size", -512}, pkv{"state", "inactive"})}, -1, "segments[0].blocks[0].size: negative size -512"},
		{"block missing state", plist{block(pkv{"size", 512})}, -1, `segments[0].blocks[0]: missing key "state"`},
		{"block history", plist{block(pkv{"size", 512}, pkv{"state", "inactive"}, pkv{"history", plist{pdict{{"real_size", "x"}}}})}, -1,
			"segments[0].blocks[0].history[0].real_size: expected int, got str"},
		{"traces type", pdict{{"device_traces", pdict{}}}, -1, "device_traces: expected list, got dict"},
		{"device trace type", pdict{{"device_traces", plist{plist{}, 0}}}, -1, "device_traces[1]: expected list, got int"},
		{"entry type", traces(plist{}), 1, "device_traces[1][0]: expected dict, got list"},
		{"entry size type", traces(ptEntry("alloc", 1, 1), ptEntry("alloc", 1, "x")), 2, "device_traces[1][1].size: expected int, got str"},
		{"entry negative size", traces(ptEntry("free_completed", 1, -3)), 1, "device_traces[1][0].size: negative size -3"},
		{"unknown action", traces(ptEntry("alloc", 1, 1), ptEntry("realloc", 1, 1)), 2, `device_traces[1][1].action: unknown action "realloc"`},
		{"action type", traces(ptEntry("alloc", 1, 1), pdict{{"action", 1}}), 2, `device_traces[1][1].action: expected str, got int`},
		{"missing action", traces(pdict{{"addr", 1}}), 1, `device_traces[1][0]: missing key "action"`},
		{"missing addr", traces(ptEntry("alloc", nil, 1)), 1, `device_traces[1][0]: missing key "addr"`},
		{"missing size", traces(ptEntry("free_requested", 1, nil)), 1, `device_traces[1][0]: missing key "size"`},
		{"oom missing size", traces(ptEntry("oom", nil, nil)), 1, `device_traces[1][0]: missing key "size"`},
		{"time type", traces(ptEntry("alloc", 1, 1, pkv{"time_us", 1.5})), 1, "device_traces[1][0].time_us: expected int, got float"},
		{"time range", traces(ptEntry("alloc", 1, 1, pkv{"time_us", uint64(1 << 63)})), 1, "device_traces[1][0].time_us: 9223372036854775808 does not fit in int64"},
		{"stream type", traces(ptEntry("alloc", 1, 1, pkv{"stream", nil})), 1, "device_traces[1][0].stream: expected int, got NoneType"},
		{"frames type", traces(ptEntry("alloc", 1, 1, pkv{"frames", pdict{}})), 1, "device_traces[1][0].frames: expected list, got dict"},
		{"frame name", traces(ptEntry("alloc", 1, 1, pkv{"frames", plist{pdict{{"name", 5}}}})), 1, "device_traces[1][0].frames[0].name: expected str, got int"},
		{"settings type", pdict{{"allocator_settings", plist{}}}, -1, "allocator_settings: expected dict, got list"},
		{"settings bool", pdict{{"allocator_settings", pdict{{"expandable_segments", "True"}}}}, -1, "allocator_settings.expandable_segments: expected bool, got str"},
		{"settings int", pdict{{"allocator_settings", pdict{{"max_split_size", 1.5}}}}, -1, "allocator_settings.max_split_size: expected int, got float"},
		{"settings float", pdict{{"allocator_settings", pdict{{"garbage_collection_threshold", "0.5"}}}}, -1, "allocator_settings.garbage_collection_threshold: expected float, got str"},
		{"settings str", pdict{{"allocator_settings", pdict{{"PYTORCH_CUDA_ALLOC_CONF", nil}}}}, -1, "allocator_settings.PYTORCH_CUDA_ALLOC_CONF: expected str, got NoneType"},
		{"settings roundup", pdict{{"allocator_settings", pdict{{"roundup_power2_divisions", pdict{{"1", "x"}}}}}}, -1, "allocator_settings.roundup_power2_divisions.1: expected int, got str"},
		// external_annotations (pytorch_annot.go)
		{"not a list", pdict{{"external_annotations", pdict{}}}, -1, "external_annotations: expected list, got dict"},
		{"none", pdict{{"external_annotations", nil}}, -1, "external_annotations: expected list, got NoneType"},
		{"item type", ptAnnotated(ptAnnot("START", "a", 0, 1), 5), -1, "external_annotations[1]: expected dict, got int"},
		{"missing device", ptAnnotated(pdict{{"stage", "START"}, {"name", "a"}, {"time_us", 1}}), -1, `external_annotations[0]: missing key "device"`},
		{"missing time", ptAnnotated(pdict{{"stage", "START"}, {"name", "a"}, {"device", 0}}), -1, `external_annotations[0]: missing key "time_us"`},
		{"time type", ptAnnotated(ptAnnot("START", "a", 0, "1")), -1, "external_annotations[0].time_us: expected int, got str"},
		{"time range", ptAnnotated(ptAnnot("START", "a", 0, uint64(1<<63))), -1, "external_annotations[0].time_us: 9223372036854775808 does not fit in int64"},
		{"device type", ptAnnotated(ptAnnot("START", "a", 0.5, 1)), -1, "external_annotations[0].device: expected int, got float"},
		{"device range", ptAnnotated(ptAnnot("START", "a", -1, 1)), -1, "external_annotations[0].device: device -1 out of range"},
		{"name type", ptAnnotated(pdict{{"stage", "END"}, {"name", 7}, {"device", 0}, {"time_us", 1}}), -1, "external_annotations[0].name: expected str, got int"},
		{"stage type", ptAnnotated(pdict{{"stage", nil}, {"name", "a"}, {"device", 0}, {"time_us", 1}}), -1, "external_annotations[0].stage: expected str, got NoneType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readPT(t, encodePickle(tc.in, false))
			require.Error(t, err)
			var fe *FormatError
			require.True(t, errors.As(err, &fe), "%T: %v", err, err)
			assert.Equal(t, "test.pickle", fe.File)
			assert.Equal(t, int64(-1), fe.Offset)
			assert.Equal(t, tc.event, fe.Event)
			assert.Equal(t, tc.msg, fe.Msg)
		})
	}
}

// A pickle that references one big segment many times must not expand
// into that many copies.
func TestReadPyTorchExpansionBomb(t *testing.T) {
	blocks := make(plist, 1000)
	for i := range blocks {
		blocks[i] = pdict{{"size", 0}, {"state", "inactive"}}
	}
	big := &pshared{pdict{{"device", 0}, {"address", 0}, {"total_size", 0}, {"blocks", blocks}}}
	segs := make(plist, 20000)
	for i := range segs {
		segs[i] = big
	}
	_, err := readPT(t, encodePickle(segs, false))
	var fe *FormatError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Contains(t, fe.Msg, "expands to more objects than its size allows")

	// The same through device_traces and settings.
	entry := &pshared{ptEntry("alloc", 1, 1)}
	list := make(plist, 20000)
	for i := range list {
		list[i] = entry
	}
	shared := &pshared{list}
	devices := make(plist, 1000)
	for i := range devices {
		devices[i] = shared
	}
	_, err = readPT(t, encodePickle(pdict{{"device_traces", devices}}, false))
	assert.ErrorContains(t, err, "expands to more objects")

	var d any = 1
	for level := range 3 {
		wide := make(pdict, 1000)
		for i := range wide {
			wide[i] = pkv{strconv.Itoa(level*1000 + i), d}
		}
		d = &pshared{wide}
	}
	tr, err := readPT(t, encodePickle(pdict{{"allocator_settings", pdict{{"future", d}}}}, false))
	require.NoError(t, err)
	assert.Equal(t, []string{"allocator_settings.future of type dict skipped"}, tr.Header.Notes)
}

func TestReadPyTorchBadPickle(t *testing.T) {
	data, err := os.ReadFile(testdataSnapshot)
	require.NoError(t, err)
	_, err = ReadPyTorch(bytes.NewReader(data[:1000]), "cut.pickle")
	var fe *FormatError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "cut.pickle", fe.File)
	assert.Contains(t, err.Error(), "cut.pickle: byte offset ")
	assert.Contains(t, fe.Msg, "truncated")

	_, err = ReadPyTorchFile("testdata/does-not-exist.pickle")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// pipeImport imports data as readPyTorchPath imports a pipe: a reader
// that has no size.
func pipeImport(data []byte, name string) (*Trace, error) {
	return readPyTorchTrace(name, struct{ io.Reader }{bytes.NewReader(data)})
}

// FuzzPyTorch: no input panics; errors are *FormatErrors; a trace that
// comes back has valid stack IDs.
func FuzzPyTorch(f *testing.F) {
	f.Add(encodePickle(smallPTSnapshot(), false))
	f.Add(encodePickle(smallPTSnapshot(), true))
	f.Add(cppStylePickle())
	f.Add(encodePickle(annotatedPTSnapshot(), false))
	f.Add(encodePickle(annotatedPTSnapshot(), true))
	if data, err := os.ReadFile(testdataSnapshot); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadPyTorch(bytes.NewReader(data), "fuzz")
		// Streaming (ReadPyTorch) gives what the whole import gives, the
		// same trace or the same error.
		whole, werr := wholeImport(data, "fuzz")
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("streamed: %v; whole: %v", err, werr)
		}
		if err == nil && !reflect.DeepEqual(tr, whole) {
			t.Fatalf("streamed and whole imports differ")
		}
		// A pipe, streamed with no size to check lengths against, gives
		// the same too.
		pipe, perr := pipeImport(data, "fuzz")
		if (err == nil) != (perr == nil) || (err != nil && err.Error() != perr.Error()) {
			t.Fatalf("streamed: %v; from a pipe: %v", err, perr)
		}
		if err == nil && !reflect.DeepEqual(tr, pipe) {
			t.Fatalf("streamed and piped imports differ")
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%T is not *FormatError: %v", err, err)
			}
			if fe.File != "fuzz" || fe.Offset < -1 || fe.Offset > int64(len(data)) {
				t.Fatalf("bad error position: %+v", fe)
			}
			return
		}
		n := StackID(tr.Stacks.NumStacks())
		for _, e := range tr.Events {
			if e.Stack >= n || e.Action == ActionInvalid {
				t.Fatalf("bad event %+v", e)
			}
		}
		for _, s := range tr.Final {
			for _, b := range s.Blocks {
				if b.Stack >= n {
					t.Fatalf("bad block %+v", b)
				}
			}
		}
	})
}

package config

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	both    = []Dialect{DialectNew, DialectOld}
	newOnly = []Dialect{DialectNew}
	oldOnly = []Dialect{DialectOld}
)

func dialectName(d Dialect) string {
	if d == DialectOld {
		return "old"
	}
	return "new"
}

// fresh is Default in dialect d, the state every table case starts from.
func fresh(d Dialect) Config {
	c := Default()
	c.Dialect = d
	return c
}

type acceptCase struct {
	in       string
	dialects []Dialect
	want     func(c *Config) // applied to fresh(d) to get the expected Config
}

func roundupAll(v uint64) func(c *Config) {
	return func(c *Config) { fillRoundup(&c.RoundupPower2Divisions, 0, RoundupIntervals, v) }
}

var acceptCases = []acceptCase{
	{"", both, func(c *Config) {}},
	{"backend:native", both, func(c *Config) {}},
	{"backend:cudaMallocAsync", both, func(c *Config) { c.Backend = BackendCudaMallocAsync }},

	{"max_split_size_mb:21", both, func(c *Config) { c.MaxSplitSize = 21 * MiB }},
	{"max_split_size_mb:20", newOnly, func(c *Config) { c.MaxSplitSize = 20 * MiB }},
	{"max_split_size_mb:1024", both, func(c *Config) { c.MaxSplitSize = 1024 * MiB }},
	{"max_split_size_mb:+64", both, func(c *Config) { c.MaxSplitSize = 64 * MiB }},
	{"max_split_size_mb:64MB", both, func(c *Config) { c.MaxSplitSize = 64 * MiB }},
	{"max_split_size_mb:64.9", both, func(c *Config) { c.MaxSplitSize = 64 * MiB }},
	{"max_split_size_mb:2147483647", both, func(c *Config) { c.MaxSplitSize = 2147483647 * MiB }},
	{"max_split_size_mb:-1", both, func(c *Config) { c.MaxSplitSize = maxMB * MiB }},
	{"max_split_size_mb:-1000", both, func(c *Config) { c.MaxSplitSize = maxMB * MiB }},
	{"max_split_size_mb:18446744073709551615", newOnly, func(c *Config) { c.MaxSplitSize = maxMB * MiB }},
	{"max_split_size_mb:17592186044414", newOnly, func(c *Config) { c.MaxSplitSize = (maxMB - 1) * MiB }},
	{"max_non_split_rounding_mb:64", both, func(c *Config) { c.MaxNonSplitRoundingSize = 64 * MiB }},
	{"max_non_split_rounding_mb:20", newOnly, func(c *Config) {}},
	{"max_non_split_rounding_mb:-1", both, func(c *Config) { c.MaxNonSplitRoundingSize = maxMB * MiB }},

	{"roundup_power2_divisions:4", both, roundupAll(4)},
	{"roundup_power2_divisions:1", both, roundupAll(1)},
	{"roundup_power2_divisions:1073741824", both, roundupAll(1 << 30)},
	{"roundup_power2_divisions:9223372036854775808", newOnly, roundupAll(1 << 63)},
	{"roundup_power2_divisions:[]", both, func(c *Config) {}},
	// An unclosed list is accepted by the old parser: its loop just runs
	// out of tokens.
	{"roundup_power2_divisions:[", oldOnly, func(c *Config) {}},
	{"roundup_power2_divisions:[64:8,", oldOnly, func(c *Config) {
		fillRoundup(&c.RoundupPower2Divisions, 0, 7, 8)
	}},

	{"garbage_collection_threshold:0.6", both, func(c *Config) { c.GarbageCollectionThreshold = 0.6 }},
	{"garbage_collection_threshold:6e-1", both, func(c *Config) { c.GarbageCollectionThreshold = 0.6 }},
	{"garbage_collection_threshold:.5", both, func(c *Config) { c.GarbageCollectionThreshold = 0.5 }},
	{"garbage_collection_threshold:0x1p-2", both, func(c *Config) { c.GarbageCollectionThreshold = 0.25 }},
	{"garbage_collection_threshold:0x.8", both, func(c *Config) { c.GarbageCollectionThreshold = 0.5 }},
	{"garbage_collection_threshold:0.5abc", both, func(c *Config) { c.GarbageCollectionThreshold = 0.5 }},
	{"garbage_collection_threshold:0.999999", both, func(c *Config) { c.GarbageCollectionThreshold = 0.999999 }},

	{"expandable_segments:True", both, func(c *Config) { c.ExpandableSegments = true }},
	{"expandable_segments:False", both, func(c *Config) {}},
	{"release_lock_on_cudamalloc:True", both, func(c *Config) { c.ReleaseLockOnCudaMalloc = true }},
	{"release_lock_on_hipmalloc:True", both, func(c *Config) { c.ReleaseLockOnCudaMalloc = true }},
	{"pinned_use_cuda_host_register:True", both, func(c *Config) { c.PinnedUseCudaHostRegister = true }},
	{"pinned_use_hip_host_register:True", both, func(c *Config) { c.PinnedUseCudaHostRegister = true }},
	{"pinned_num_register_threads:1", both, func(c *Config) {}},
	{"pinned_num_register_threads:8", both, func(c *Config) { c.PinnedNumRegisterThreads = 8 }},
	{"pinned_num_register_threads:128", both, func(c *Config) { c.PinnedNumRegisterThreads = 128 }},
	{"pinned_use_background_threads:True", both, func(c *Config) { c.PinnedUseBackgroundThreads = true }},
	{"pinned_reserve_segment_size_mb:64", both, func(c *Config) { c.PinnedReserveSegmentSizeMB = 64 }},
	{"pinned_reserve_segment_size_mb:-1", both, func(c *Config) { c.PinnedReserveSegmentSizeMB = math.MaxUint64 }},
	{"graph_capture_record_stream_reuse:True", both, func(c *Config) { c.GraphCaptureRecordStreamReuse = true }},

	{"per_process_memory_fraction:0.0", newOnly, func(c *Config) { c.PerProcessMemoryFraction = 0 }},
	{"per_process_memory_fraction:0.5", newOnly, func(c *Config) { c.PerProcessMemoryFraction = 0.5 }},
	{"per_process_memory_fraction:1.0", newOnly, func(c *Config) {}},
	{"per_process_memory_fraction:1", newOnly, func(c *Config) {}},
	{"large_segment_size_mb:11", newOnly, func(c *Config) { c.LargeSegmentSize = 11 * MiB }},
	{"large_segment_size_mb:64", newOnly, func(c *Config) { c.LargeSegmentSize = 64 * MiB }},
	{"throw_on_cudamalloc_oom:True", newOnly, func(c *Config) { c.ThrowOnCudaMallocOOM = true }},
	{"pinned_free_catch_all:True", newOnly, func(c *Config) { c.PinnedFreeCatchAll = true }},
	{"pinned_max_round_threshold_mb:128", newOnly, func(c *Config) { c.PinnedMaxRoundThresholdMB = 128 }},
	{"pinned_max_cached_size_mb:64", newOnly, func(c *Config) { c.PinnedMaxCachedSizeMB = 64 }},
	{"expandable_segments_reserve:0.5", newOnly, func(c *Config) { c.ExpandableSegmentsReserve = "0.5" }},
	{"expandable_segments_reserve:40G", newOnly, func(c *Config) { c.ExpandableSegmentsReserve = "40G" }},
	{"expandable_segments_reserve:1.5g", newOnly, func(c *Config) { c.ExpandableSegmentsReserve = "1.5g" }},
	// Bad reserve values only warn in PyTorch and keep the previous value.
	{"expandable_segments_reserve:0", newOnly, func(c *Config) {}},
	{"expandable_segments_reserve:-1G", newOnly, func(c *Config) {}},
	{"expandable_segments_reserve:inf", newOnly, func(c *Config) {}},
	{"expandable_segments_reserve:40GB", newOnly, func(c *Config) {}},
	{"expandable_segments_reserve:0x10", newOnly, func(c *Config) {}},
	{"expandable_segments_reserve_by_class:[b:40G,a:0.5,c:bad]", newOnly, func(c *Config) {
		c.ExpandableSegmentsReserveByClass = "a:0.5,b:40G"
	}},
	{"expandable_segments_reserve_by_class:[a:1,a:2]", newOnly, func(c *Config) { c.ExpandableSegmentsReserveByClass = "a:2" }},
	{"expandable_segments_reserve_by_class:[]", newOnly, func(c *Config) {}},

	// Whitespace is dropped anywhere, even inside a word.
	{" expandable_segments : True , max_split_size_mb : 6 4 ", both, func(c *Config) {
		c.ExpandableSegments = true
		c.MaxSplitSize = 64 * MiB
	}},
	{"expandable_segments:\tTrue,max_split\n_size_mb:64", newOnly, func(c *Config) {
		c.ExpandableSegments = true
		c.MaxSplitSize = 64 * MiB
	}},
	// A trailing comma is consumed as the separator and nothing follows.
	{"expandable_segments:True,", both, func(c *Config) { c.ExpandableSegments = true }},
	// checkToken in the new parser only checks that a token exists.
	{"expandable_segments:True:max_split_size_mb,64", newOnly, func(c *Config) {
		c.ExpandableSegments = true
		c.MaxSplitSize = 64 * MiB
	}},
	// The old parser never sees past a NUL (it goes through c_str()).
	{"expandable_segments:True\x00garbage", oldOnly, func(c *Config) { c.ExpandableSegments = true }},
	{"max_split_size_mb:64,roundup_power2_divisions:2,garbage_collection_threshold:0.8,expandable_segments:True," +
		"release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:4," +
		"pinned_use_background_threads:True,pinned_reserve_segment_size_mb:32,graph_capture_record_stream_reuse:True," +
		"max_non_split_rounding_mb:40", both, func(c *Config) {
		c.MaxSplitSize = 64 * MiB
		fillRoundup(&c.RoundupPower2Divisions, 0, RoundupIntervals, 2)
		c.GarbageCollectionThreshold = 0.8
		c.ExpandableSegments = true
		c.ReleaseLockOnCudaMalloc = true
		c.PinnedUseCudaHostRegister = true
		c.PinnedNumRegisterThreads = 4
		c.PinnedUseBackgroundThreads = true
		c.PinnedReserveSegmentSizeMB = 32
		c.GraphCaptureRecordStreamReuse = true
		c.MaxNonSplitRoundingSize = 40 * MiB
	}},
}

func TestApplyAccepts(t *testing.T) {
	for _, tc := range acceptCases {
		for _, d := range tc.dialects {
			t.Run(dialectName(d)+"/"+tc.in, func(t *testing.T) {
				want := fresh(d)
				tc.want(&want)
				want.Source = tc.in

				got := fresh(d)
				require.NoError(t, got.Apply(tc.in))
				assert.Equal(t, want, got)
			})
		}
	}
}

func TestParseIsNewDialectFromDefaults(t *testing.T) {
	c, err := Parse("expandable_segments:True")
	require.NoError(t, err)
	want := Default()
	want.ExpandableSegments = true
	want.Source = "expandable_segments:True"
	assert.Equal(t, want, c)

	_, err = Parse("max_split_size_mb:20")
	assert.NoError(t, err, "the new dialect takes 20")
}

// test_allocator_settings re-parses and relies on only three options being
// reset.
func TestApplyResetsOnlyThreeOptions(t *testing.T) {
	for _, d := range both {
		t.Run(dialectName(d), func(t *testing.T) {
			c := fresh(d)
			require.NoError(t, c.Apply("roundup_power2_divisions:4,max_split_size_mb:64,"+
				"garbage_collection_threshold:0.5,pinned_num_register_threads:8,max_non_split_rounding_mb:30"))
			require.Equal(t, uint64(4), c.RoundupDivisions(84*MiB))

			require.NoError(t, c.Apply("expandable_segments:True"))
			assert.Equal(t, [RoundupIntervals]uint64{}, c.RoundupPower2Divisions)
			assert.Equal(t, uint64(Unlimited), c.MaxSplitSize)
			assert.Zero(t, c.GarbageCollectionThreshold)
			assert.True(t, c.ExpandableSegments)
			assert.Equal(t, uint64(8), c.PinnedNumRegisterThreads, "not reset")
			assert.Equal(t, uint64(30*MiB), c.MaxNonSplitRoundingSize, "not reset")

			require.NoError(t, c.Apply("release_lock_on_cudamalloc:True"))
			assert.True(t, c.ExpandableSegments, "kept across a parse that does not name it")
			assert.True(t, c.ReleaseLockOnCudaMalloc)
			assert.Equal(t, "release_lock_on_cudamalloc:True", c.Source)

			require.NoError(t, c.Apply("expandable_segments:False"))
			assert.False(t, c.ExpandableSegments)
			assert.True(t, c.ReleaseLockOnCudaMalloc)
		})
	}
}

func TestApplyLeavesConfigUnchangedOnError(t *testing.T) {
	for _, d := range both {
		t.Run(dialectName(d), func(t *testing.T) {
			c := fresh(d)
			require.NoError(t, c.Apply("roundup_power2_divisions:4,max_split_size_mb:64,expandable_segments:True"))
			before := c
			// The bad option comes after good ones that would reset and
			// set fields.
			err := c.Apply("garbage_collection_threshold:0.5,release_lock_on_cudamalloc:True,pinned_num_register_threads:3")
			require.Error(t, err)
			assert.Equal(t, before, c)
		})
	}
}

func TestBackendIsFixedAtFirstApply(t *testing.T) {
	c, err := Parse("backend:cudaMallocAsync,expandable_segments:True")
	require.NoError(t, err)
	assert.Equal(t, BackendCudaMallocAsync, c.Backend)

	// Later parses may repeat the backend, or leave it out, but not change it.
	require.NoError(t, c.Apply("backend:cudaMallocAsync"))
	require.NoError(t, c.Apply("max_split_size_mb:64"))
	assert.Equal(t, BackendCudaMallocAsync, c.Backend)
	err = c.Apply("backend:native")
	requireError(t, err, "backend:native", 8, "backend",
		"Allocator backend parsed at runtime != allocator backend parsed at load time, native != cudaMallocAsync")

	old := fresh(DialectOld)
	require.NoError(t, old.Apply("max_split_size_mb:64"))
	err = old.Apply("backend:cudaMallocAsync")
	requireError(t, err, "backend:cudaMallocAsync", 8, "backend",
		"Allocator backend parsed at runtime != allocator backend parsed at load time")
}

func TestLoadTimeBackendScan(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"backend:cudaMallocAsync", BackendCudaMallocAsync, true},
		{"expandable_segments:True, backend::cudaMallocAsync", BackendCudaMallocAsync, true},
		{"backend:native,backend:cudaMallocAsync", BackendNative, true},
		{"backend:foo,backend:cudaMallocAsync", BackendCudaMallocAsync, true},
		{"backend: cudaMallocAsync", "", false},
		{":backend:cudaMallocAsync", "", false},
		{"", "", false},
	} {
		got, ok := loadTimeBackend(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}

	// Where the load-time scan and the tokenizer disagree, PyTorch's
	// runtime check fails, and so does Apply.
	_, err := Parse("backend: cudaMallocAsync")
	requireError(t, err, "backend: cudaMallocAsync", 9, "backend",
		"Allocator backend parsed at runtime != allocator backend parsed at load time, cudaMallocAsync != native")
	_, err = Parse("backend:native,backend:cudaMallocAsync")
	require.Error(t, err)
}

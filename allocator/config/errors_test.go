package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// end stands for len(input): the parser ran out of tokens.
const end = -1

type errorCase struct {
	d      Dialect
	in     string
	offset int
	option string
	msg    string
}

var oldErrorCases = []errorCase{
	{DialectOld, "foo:1,bar:2", 0, "foo", "Unrecognized CachingAllocator option: foo"},
	{DialectOld, "max_split_size_mb=30", 0, "max_split_size_mb=30", "Unrecognized CachingAllocator option: max_split_size_mb=30"},
	{DialectOld, ",expandable_segments:True", 0, ",", "Unrecognized CachingAllocator option: ,"},
	{DialectOld, "expandable_segments\t:True", 0, "expandable_segments\t", "Unrecognized CachingAllocator option: expandable_segments\t"},
	{DialectOld, "max_split_size_mb", end, "max_split_size_mb", "Error parsing CachingAllocator settings, expected :"},
	{DialectOld, "max_split_size_mb,30", 17, "max_split_size_mb", "Error parsing CachingAllocator settings, expected :"},
	{DialectOld, "expandable_segments:True:max_split_size_mb:64", 24, "expandable_segments", "Error parsing CachingAllocator settings, expected ,"},
	{DialectOld, "max_split_size_mb:", end, "max_split_size_mb", "Error, expecting max_split_size_mb value"},
	{DialectOld, "max_split_size_mb:2", 18, "max_split_size_mb", "CachingAllocator option max_split_size_mb too small, must be > 20"},
	{DialectOld, "max_split_size_mb:20", 18, "max_split_size_mb", "CachingAllocator option max_split_size_mb too small, must be > 20"},
	{DialectOld, "max_split_size_mb:abc", 18, "max_split_size_mb", "stoi"},
	{DialectOld, "max_split_size_mb:3000000000", 18, "max_split_size_mb", "stoi"},
	{DialectOld, "max_non_split_rounding_mb:", end, "max_non_split_rounding_mb", "Error, expecting max_non_split_rounding_mb value"},
	{DialectOld, "max_non_split_rounding_mb:20", 26, "max_non_split_rounding_mb", "CachingAllocator option max_non_split_rounding_mb too small, must be > 20"},
	{DialectOld, "garbage_collection_threshold:", end, "garbage_collection_threshold", "Error, expecting garbage_collection_threshold value"},
	{DialectOld, "garbage_collection_threshold:0", 29, "garbage_collection_threshold", "garbage_collect_threshold too small, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:-0.5", 29, "garbage_collection_threshold", "garbage_collect_threshold too small, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:nan", 29, "garbage_collection_threshold", "garbage_collect_threshold too small, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:1.2", 29, "garbage_collection_threshold", "garbage_collect_threshold too big, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:1", 29, "garbage_collection_threshold", "garbage_collect_threshold too big, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:inf", 29, "garbage_collection_threshold", "garbage_collect_threshold too big, set it 0.0~1.0"},
	{DialectOld, "garbage_collection_threshold:x", 29, "garbage_collection_threshold", "stod"},
	{DialectOld, "garbage_collection_threshold:1e-400", 29, "garbage_collection_threshold", "stod"},
	{DialectOld, "garbage_collection_threshold:1e400", 29, "garbage_collection_threshold", "stod"},
	{DialectOld, "roundup_power2_divisions:", end, "roundup_power2_divisions", "Error, expecting roundup_power2_divisions value"},
	{DialectOld, "roundup_power2_divisions:3", 25, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 "},
	{DialectOld, "roundup_power2_divisions:0", 25, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 "},
	{DialectOld, "roundup_power2_divisions:-4", 25, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 "},
	{DialectOld, "roundup_power2_divisions:]", 25, "roundup_power2_divisions", "stoi"},
	{DialectOld, "roundup_power2_divisions:[64:3]", 29, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 or 0 to disable roundup "},
	{DialectOld, "roundup_power2_divisions:[63:2]", 26, "roundup_power2_divisions", "For roundups, the intervals have to be power of 2 "},
	{DialectOld, "roundup_power2_divisions:[0:2]", 26, "roundup_power2_divisions", "For roundups, the intervals have to be power of 2 "},
	{DialectOld, "roundup_power2_divisions:[x:2]", 26, "roundup_power2_divisions", "stoul"},
	{DialectOld, "roundup_power2_divisions:[64,8]", 28, "roundup_power2_divisions", "Error parsing CachingAllocator settings, expected :"},
	{DialectOld, "roundup_power2_divisions:[64:", end, "roundup_power2_divisions", "Error parsing roundup_power2_divisions value"},
	{DialectOld, "roundup_power2_divisions:[64:8", end, "roundup_power2_divisions", "Error parsing CachingAllocator settings, expected ,"},
	{DialectOld, "roundup_power2_divisions:[64:8:128:2]", 30, "roundup_power2_divisions", "Error parsing CachingAllocator settings, expected ,"},
	{DialectOld, "backend:", end, "backend", "Error parsing backend value"},
	{DialectOld, "backend::cudaMallocAsync", 8, "backend", "Unknown allocator backend, options are native and cudaMallocAsync"},
	{DialectOld, "backend:hipMallocAsync", 8, "backend", "Unknown allocator backend, options are native and cudaMallocAsync"},
	// The inline booleans have no "Error, expecting" branch.
	{DialectOld, "expandable_segments:", end, "expandable_segments", "Expected a single True/False argument for expandable_segments"},
	{DialectOld, "expandable_segments:none", 20, "expandable_segments", "Expected a single True/False argument for expandable_segments"},
	{DialectOld, "expandable_segments:true", 20, "expandable_segments", "Expected a single True/False argument for expandable_segments"},
	{DialectOld, "expandable_segments:\tTrue", 20, "expandable_segments", "Expected a single True/False argument for expandable_segments"},
	{DialectOld, "release_lock_on_hipmalloc:1", 26, "release_lock_on_hipmalloc", "Expected a single True/False argument for release_lock_on_cudamalloc"},
	{DialectOld, "release_lock_on_cudamalloc:", end, "release_lock_on_cudamalloc", "Expected a single True/False argument for release_lock_on_cudamalloc"},
	{DialectOld, "pinned_use_hip_host_register:x", 29, "pinned_use_hip_host_register", "Expected a single True/False argument for pinned_use_cuda_host_register"},
	{DialectOld, "pinned_use_cuda_host_register:", end, "pinned_use_cuda_host_register", "Error, expecting pinned_use_cuda_host_register value"},
	{DialectOld, "pinned_use_background_threads:x", 30, "pinned_use_background_threads", "Expected a single True/False argument for pinned_use_background_threads"},
	{DialectOld, "pinned_use_background_threads:", end, "pinned_use_background_threads", "Error, expecting pinned_use_background_threads value"},
	{DialectOld, "graph_capture_record_stream_reuse:x", 34, "graph_capture_record_stream_reuse", "Expected a single True/False argument for graph_capture_record_stream_reuse"},
	{DialectOld, "graph_capture_record_stream_reuse:", end, "graph_capture_record_stream_reuse", "Error, expecting graph_capture_record_stream_reuse value"},
	{DialectOld, "pinned_num_register_threads:", end, "pinned_num_register_threads", "Error, expecting pinned_num_register_threads value"},
	{DialectOld, "pinned_num_register_threads:3", 28, "pinned_num_register_threads", "Number of register threads has to be power of 2 "},
	{DialectOld, "pinned_num_register_threads:0", 28, "pinned_num_register_threads", "Number of register threads has to be power of 2 "},
	{DialectOld, "pinned_num_register_threads:1024", 28, "pinned_num_register_threads", "Number of register threads should be less than or equal to 128"},
	{DialectOld, "pinned_reserve_segment_size_mb:", end, "pinned_reserve_segment_size_mb", "Error, expecting pinned_reserve_segment_size_mb value"},
	{DialectOld, "pinned_reserve_segment_size_mb:0", 31, "pinned_reserve_segment_size_mb", "Pinned reserve segment size has to be greater than 0 "},
	// Options newer than the old parser.
	{DialectOld, "per_process_memory_fraction:0.5", 0, "per_process_memory_fraction", "Unrecognized CachingAllocator option: per_process_memory_fraction"},
	{DialectOld, "large_segment_size_mb:64", 0, "large_segment_size_mb", "Unrecognized CachingAllocator option: large_segment_size_mb"},
	{DialectOld, "throw_on_cudamalloc_oom:True", 0, "throw_on_cudamalloc_oom", "Unrecognized CachingAllocator option: throw_on_cudamalloc_oom"},
	{DialectOld, "expandable_segments_reserve:0.5", 0, "expandable_segments_reserve", "Unrecognized CachingAllocator option: expandable_segments_reserve"},
	{DialectOld, "pinned_free_catch_all:True", 0, "pinned_free_catch_all", "Unrecognized CachingAllocator option: pinned_free_catch_all"},
}

var newErrorCases = []errorCase{
	{DialectNew, "foo:1,bar:2", 0, "foo", "Unrecognized key 'foo' in CUDA allocator config."},
	{DialectNew, "expandable_segments:True,bar:2", 25, "bar", "Unrecognized key 'bar' in CUDA allocator config."},
	{DialectNew, ",expandable_segments:True", 0, ",", "Unrecognized key ',' in CUDA allocator config."},
	// The device-independent pass runs first over the whole string, so
	// its error wins over an unknown key that comes earlier.
	{DialectNew, "foo:1,max_split_size_mb:2", 24, "max_split_size_mb", "CachingAllocator option max_split_size_mb too small, must be >= 20"},
	{DialectNew, "foo", end, "foo", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "per_process_memory_fraction", end, "per_process_memory_fraction", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "max_split_size_mb", end, "max_split_size_mb", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "max_split_size_mb:", end, "max_split_size_mb", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "max_split_size_mb:2", 18, "max_split_size_mb", "CachingAllocator option max_split_size_mb too small, must be >= 20"},
	{DialectNew, "max_split_size_mb:19", 18, "max_split_size_mb", "CachingAllocator option max_split_size_mb too small, must be >= 20"},
	{DialectNew, "max_split_size_mb:abc", 18, "max_split_size_mb", "stoull"},
	{DialectNew, "max_split_size_mb:18446744073709551616", 18, "max_split_size_mb", "stoull"},
	{DialectNew, "max_non_split_rounding_mb:19", 26, "max_non_split_rounding_mb", "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20"},
	{DialectNew, "large_segment_size_mb:10", 22, "large_segment_size_mb", "CachingAllocator option large_segment_size_mb must be > 10 MB"},
	{DialectNew, "large_segment_size_mb:x", 22, "large_segment_size_mb", "stoull"},
	{DialectNew, "garbage_collection_threshold:", end, "garbage_collection_threshold", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "garbage_collection_threshold:0", 29, "garbage_collection_threshold", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"},
	{DialectNew, "garbage_collection_threshold:1.2", 29, "garbage_collection_threshold", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"},
	{DialectNew, "garbage_collection_threshold:NaN", 29, "garbage_collection_threshold", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"},
	{DialectNew, "garbage_collection_threshold:x", 29, "garbage_collection_threshold", "stod"},
	{DialectNew, "roundup_power2_divisions:", end, "roundup_power2_divisions", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "roundup_power2_divisions:3", 25, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 "},
	{DialectNew, "roundup_power2_divisions:0", 25, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 "},
	{DialectNew, "roundup_power2_divisions:[64:3]", 29, "roundup_power2_divisions", "For roundups, the divisions has to be power of 2 or 0 to disable roundup "},
	{DialectNew, "roundup_power2_divisions:[63:2]", 26, "roundup_power2_divisions", "For roundups, the intervals have to be power of 2 "},
	{DialectNew, "roundup_power2_divisions:[x:2]", 26, "roundup_power2_divisions", "stoull"},
	{DialectNew, "roundup_power2_divisions:[64", end, "roundup_power2_divisions", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "roundup_power2_divisions:[64:8", end, "roundup_power2_divisions", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "roundup_power2_divisions:[", end, "roundup_power2_divisions", "Expected closing bracket ']' in ConfigTokenizer but reached end of config"},
	{DialectNew, "roundup_power2_divisions:[64:8,", end, "roundup_power2_divisions", "Expected closing bracket ']' in ConfigTokenizer but reached end of config"},
	{DialectNew, "backend:", end, "backend", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "backend:hipMallocAsync", 8, "backend", "Unknown allocator backend, options are native and cudaMallocAsync"},
	{DialectNew, "expandable_segments:none", 20, "expandable_segments", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'none'"},
	{DialectNew, "max_split_size_mb:64,expandable_segments:true", 41, "expandable_segments", "Expected 'True' or 'False' at index 6 in ConfigTokenizer but got 'true'"},
	{DialectNew, "expandable_segments:", end, "expandable_segments", "Index out of bounds in ConfigTokenizer"},
	{DialectNew, "release_lock_on_cudamalloc:1", 27, "release_lock_on_cudamalloc", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'"},
	{DialectNew, "pinned_use_hip_host_register:x", 29, "pinned_use_hip_host_register", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'x'"},
	{DialectNew, "pinned_use_background_threads:x", 30, "pinned_use_background_threads", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'x'"},
	{DialectNew, "graph_capture_record_stream_reuse:x", 34, "graph_capture_record_stream_reuse", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'x'"},
	{DialectNew, "throw_on_cudamalloc_oom:yes", 24, "throw_on_cudamalloc_oom", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'"},
	{DialectNew, "pinned_free_catch_all:1", 22, "pinned_free_catch_all", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'"},
	{DialectNew, "pinned_num_register_threads:3", 28, "pinned_num_register_threads", "Number of register threads has to be power of 2, got 3"},
	{DialectNew, "pinned_num_register_threads:0", 28, "pinned_num_register_threads", "Number of register threads has to be power of 2, got 0"},
	{DialectNew, "pinned_num_register_threads:1024", 28, "pinned_num_register_threads", "Number of register threads should be less than or equal to 128, got 1024"},
	{DialectNew, "pinned_reserve_segment_size_mb:0", 31, "pinned_reserve_segment_size_mb", "Pinned reserve segment size has to be greater than 0"},
	{DialectNew, "per_process_memory_fraction:-0.1", 28, "per_process_memory_fraction", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"},
	{DialectNew, "per_process_memory_fraction:1.1", 28, "per_process_memory_fraction", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"},
	{DialectNew, "per_process_memory_fraction:nan", 28, "per_process_memory_fraction", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"},
	{DialectNew, "pinned_max_cached_size_mb:x", 26, "pinned_max_cached_size_mb", "stoull"},
	{DialectNew, "expandable_segments_reserve:", end, "expandable_segments_reserve", "Index out of bounds in ConfigTokenizer"},
	// The device-independent pass skips the list first and finds it open;
	// with a plain value it passes, and the CUDA pass runs out of tokens.
	{DialectNew, "expandable_segments_reserve_by_class:[a:1", end, "expandable_segments_reserve_by_class", "Expected closing bracket ']' in ConfigTokenizer but reached end of config"},
	{DialectNew, "expandable_segments_reserve_by_class:x", end, "expandable_segments_reserve_by_class", "Index out of bounds in ConfigTokenizer"},
	// The load-time scan reads this as cudaMallocAsync, the parser as ":".
	{DialectNew, "backend::cudaMallocAsync", 8, "backend", "Unknown allocator backend, options are native and cudaMallocAsync"},
}

func requireError(t *testing.T, err error, in string, offset int, option, msg string) {
	t.Helper()
	require.Error(t, err)
	var e *Error
	require.True(t, errors.As(err, &e), "%T is not *Error", err)
	if offset == end {
		offset = len(in)
	}
	assert.Equal(t, in, e.Input)
	assert.Equal(t, msg, e.Msg)
	assert.Equal(t, option, e.Option)
	assert.Equal(t, offset, e.Offset)
	if offset < len(in) {
		assert.Equal(t, e.Token[:1], in[offset:offset+1], "Token starts at Offset")
	} else {
		assert.Empty(t, e.Token)
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range append(append([]errorCase{}, oldErrorCases...), newErrorCases...) {
		t.Run(dialectName(tc.d)+"/"+tc.in, func(t *testing.T) {
			c := fresh(tc.d)
			err := c.Apply(tc.in)
			requireError(t, err, tc.in, tc.offset, tc.option, tc.msg)
			assert.Equal(t, fresh(tc.d), c, "unchanged after a failed Apply")
		})
	}
}

// The invalid strings of PyTorch's test_allocator_settings, rejected in
// both dialects.
func TestAllocatorSettingsInvalidStrings(t *testing.T) {
	for _, in := range []string{
		"foo:1,bar:2",
		"garbage_collection_threshold:1.2",
		"max_split_size_mb:2",
		"expandable_segments:none",
		"pinned_num_register_threads:1024",
	} {
		for _, d := range both {
			c := fresh(d)
			assert.Error(t, c.Apply(in), "%s %q", dialectName(d), in)
		}
	}
}

// test_allocator_memory_fraction_setting.
func TestMemoryFractionSetting(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{{"0.0", 0}, {"0.5", 0.5}, {"1.0", 1}} {
		c, err := Parse("per_process_memory_fraction:" + tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, c.PerProcessMemoryFraction)
	}
	for _, bad := range []string{"-0.1", "1.1"} {
		_, err := Parse("per_process_memory_fraction:" + bad)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "per_process_memory_fraction is invalid")
	}
}

func TestErrorString(t *testing.T) {
	_, err := Parse("max_split_size_mb:2")
	assert.EqualError(t, err, `alloc conf "max_split_size_mb:2" at offset 18: max_split_size_mb: `+
		`CachingAllocator option max_split_size_mb too small, must be >= 20`)

	// The trailing space PyTorch leaves in some messages is not printed;
	// the cryptic stoi messages get a detail.
	c := fresh(DialectOld)
	err = c.Apply("roundup_power2_divisions:3")
	assert.EqualError(t, err, `alloc conf "roundup_power2_divisions:3" at offset 25: roundup_power2_divisions: `+
		`For roundups, the divisions has to be power of 2`)
	err = c.Apply("max_split_size_mb:abc")
	assert.EqualError(t, err, `alloc conf "max_split_size_mb:abc" at offset 18: max_split_size_mb: stoi (not a number: "abc")`)
}

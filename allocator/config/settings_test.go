package config

import (
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllocatorSettingsShape(t *testing.T) {
	const in = "max_split_size_mb:64,garbage_collection_threshold:0.5,expandable_segments:True," +
		"pinned_num_register_threads:8,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True," +
		"roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1],graph_capture_record_stream_reuse:True"
	c, err := Parse(in)
	require.NoError(t, err)
	m := c.AllocatorSettings()
	assert.Equal(t, map[string]any{
		"PYTORCH_CUDA_ALLOC_CONF":       in,
		"max_split_size":                int64(64 * MiB),
		"garbage_collection_threshold":  0.5,
		"expandable_segments":           true,
		"pinned_num_register_threads":   int64(8),
		"release_lock_on_cudamalloc":    true,
		"pinned_use_cuda_host_register": true,
		"roundup_power2_divisions": map[string]any{
			"1": int64(8), "2": int64(8), "4": int64(8), "8": int64(8), "16": int64(8), "32": int64(8),
			"64": int64(8), "128": int64(2), "256": int64(2), "512": int64(2), "1024": int64(1),
			"2048": int64(1), "4096": int64(1), "8192": int64(1), "16384": int64(1), "32768": int64(1),
		},
		"graph_capture_record_stream_reuse": true,
	}, m)

	assert.Equal(t, int64(-1), Default().AllocatorSettings()["max_split_size"])

	back, err := FromAllocatorSettings(m)
	require.NoError(t, err)
	assert.Equal(t, c, back)
}

func TestFromAllocatorSettingsLooseTypes(t *testing.T) {
	c, err := FromAllocatorSettings(map[string]any{
		"PYTORCH_ALLOC_CONF":           "expandable_segments:True",
		"max_split_size":               float64(128 * MiB),
		"garbage_collection_threshold": "0.25",
		"expandable_segments":          "True",
		"pinned_num_register_threads":  int(4),
		"release_lock_on_cudamalloc":   int64(1),
		"roundup_power2_divisions":     map[any]any{"64": big.NewInt(4), "1": 2.0},
		"some_future_key":              []int{1},
	})
	require.NoError(t, err)
	want := Default()
	want.Source = "expandable_segments:True"
	want.MaxSplitSize = 128 * MiB
	want.GarbageCollectionThreshold = 0.25
	want.ExpandableSegments = true
	want.PinnedNumRegisterThreads = 4
	want.ReleaseLockOnCudaMalloc = true
	want.RoundupPower2Divisions[0] = 2
	want.RoundupPower2Divisions[6] = 4
	assert.Equal(t, want, c)

	c, err = FromAllocatorSettings(map[string]any{"max_split_size": int64(-1)})
	require.NoError(t, err)
	assert.Equal(t, Default(), c, "missing keys keep defaults; -1 is unlimited")

	c, err = FromAllocatorSettings(nil)
	require.NoError(t, err)
	assert.Equal(t, Default(), c)
}

func TestFromAllocatorSettingsErrors(t *testing.T) {
	for _, m := range []map[string]any{
		{"max_split_size": "big"},
		{"max_split_size": 1.5},
		{"garbage_collection_threshold": true},
		{"expandable_segments": "maybe"},
		{"expandable_segments": int64(2)},
		{"pinned_num_register_threads": int64(-1)},
		{"PYTORCH_CUDA_ALLOC_CONF": 3},
		{"roundup_power2_divisions": []int64{1}},
		{"roundup_power2_divisions": map[string]int64{"3": 1}},
		{"roundup_power2_divisions": map[string]int64{"65536": 1}},
		{"roundup_power2_divisions": map[string]int64{"64": 3}},
		{"roundup_power2_divisions": map[string]any{"64": "x"}},
	} {
		_, err := FromAllocatorSettings(m)
		assert.Error(t, err, "%v", m)
	}
}

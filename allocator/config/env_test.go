package config

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestFromEnv(t *testing.T) {
	const conf = "expandable_segments:True,release_lock_on_cudamalloc:True"
	for _, tc := range []struct {
		name   string
		vars   map[string]string
		envVar string
		want   func(c *Config)
	}{
		{"none", nil, "", func(c *Config) {}},
		{"alloc", map[string]string{EnvAllocConf: conf}, EnvAllocConf, func(c *Config) {
			c.ExpandableSegments, c.ReleaseLockOnCudaMalloc, c.Source = true, true, conf
		}},
		{"cuda alias", map[string]string{EnvCudaAllocConf: conf}, EnvCudaAllocConf, func(c *Config) {
			c.ExpandableSegments, c.ReleaseLockOnCudaMalloc, c.Source = true, true, conf
		}},
		// A CUDA build's CUDA parser never reads the HIP variable, so the
		// CUDA options in it, and its unknown keys, go unread.
		{"hip alias", map[string]string{EnvHipAllocConf: conf + ",foo:1"}, EnvHipAllocConf, func(c *Config) {
			c.ExpandableSegments, c.Source = true, conf+",foo:1"
		}},
		{"alloc wins", map[string]string{EnvAllocConf: conf, EnvCudaAllocConf: "max_split_size_mb:64", EnvHipAllocConf: "x"}, EnvAllocConf, func(c *Config) {
			c.ExpandableSegments, c.Source = true, conf
		}},
		// Set but empty still counts, for both parsers.
		{"empty alloc", map[string]string{EnvAllocConf: "", EnvCudaAllocConf: "expandable_segments:True"}, EnvAllocConf, func(c *Config) {}},
		{"backend", map[string]string{EnvAllocConf: "backend:cudaMallocAsync"}, EnvAllocConf, func(c *Config) {
			c.Backend, c.Source = BackendCudaMallocAsync, "backend:cudaMallocAsync"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(envOf(tc.vars))
			require.NoError(t, err)
			want := Default()
			tc.want(&want)
			want.EnvVar = tc.envVar
			assert.Equal(t, want, c)
		})
	}
}

// With both variables set, PyTorch 2.9's device-independent parser reads
// PYTORCH_ALLOC_CONF and its CUDA parser PYTORCH_CUDA_ALLOC_CONF.
func TestFromEnvSplitsOptionsBetweenVariables(t *testing.T) {
	c, err := FromEnv(envOf(map[string]string{
		EnvAllocConf:     "expandable_segments:True,release_lock_on_cudamalloc:True,foo:1",
		EnvCudaAllocConf: "max_split_size_mb:64,per_process_memory_fraction:0.5,backend:cudaMallocAsync",
	}))
	require.NoError(t, err)
	assert.True(t, c.ExpandableSegments)
	assert.False(t, c.ReleaseLockOnCudaMalloc, "CUDA option in PYTORCH_ALLOC_CONF is not read")
	assert.Equal(t, uint64(Unlimited), c.MaxSplitSize, "generic option in PYTORCH_CUDA_ALLOC_CONF is not read")
	assert.Equal(t, 0.5, c.PerProcessMemoryFraction)
	assert.Equal(t, BackendCudaMallocAsync, c.Backend)
	assert.Equal(t, EnvAllocConf, c.EnvVar)
}

func TestFromEnvError(t *testing.T) {
	c, err := FromEnv(envOf(map[string]string{EnvCudaAllocConf: "max_split_size_mb:2"}))
	var e *Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, "max_split_size_mb:2", e.Input)
	assert.Equal(t, 18, e.Offset)
	want := Default()
	want.EnvVar = EnvCudaAllocConf
	assert.Equal(t, want, c)
}

func TestFromEnvTakesLookupEnv(t *testing.T) {
	t.Setenv(EnvAllocConf, "expandable_segments:True")
	t.Setenv(EnvCudaAllocConf, "expandable_segments:True")
	c, err := FromEnv(os.LookupEnv)
	require.NoError(t, err)
	assert.True(t, c.ExpandableSegments)
}

// Once the environment has been read the backend is fixed, even when the
// variable was empty.
func TestFromEnvFixesBackend(t *testing.T) {
	c, err := FromEnv(envOf(map[string]string{EnvAllocConf: ""}))
	require.NoError(t, err)
	err = c.Apply("backend:cudaMallocAsync")
	requireError(t, err, "backend:cudaMallocAsync", 8, "backend",
		"Allocator backend parsed at runtime != allocator backend parsed at load time, cudaMallocAsync != native")
}

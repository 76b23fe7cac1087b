package config

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
)

// AllocatorSettings returns c shaped like the allocator_settings dict of a
// memory snapshot (torch.cuda.memory._snapshot()): the last settings
// string, max_split_size as int64 (-1 when unlimited, because PyTorch casts
// SIZE_MAX to int64), and the roundup table keyed by the interval start in
// MiB as a string ("1", "2", ..., "32768"). Values have the types the
// trace codecs take (trace.Header.AllocatorSettings): the table is a
// map[string]any of int64.
func (c Config) AllocatorSettings() map[string]any {
	table := make(map[string]any, RoundupIntervals)
	for i, v := range c.RoundupPower2Divisions {
		table[strconv.Itoa(1<<i)] = int64(v)
	}
	return map[string]any{
		"PYTORCH_CUDA_ALLOC_CONF":           c.Source,
		"max_split_size":                    int64(c.MaxSplitSize),
		"garbage_collection_threshold":      c.GarbageCollectionThreshold,
		"expandable_segments":               c.ExpandableSegments,
		"pinned_num_register_threads":       int64(c.PinnedNumRegisterThreads),
		"release_lock_on_cudamalloc":        c.ReleaseLockOnCudaMalloc,
		"pinned_use_cuda_host_register":     c.PinnedUseCudaHostRegister,
		"roundup_power2_divisions":          table,
		"graph_capture_record_stream_reuse": c.GraphCaptureRecordStreamReuse,
	}
}

// FromAllocatorSettings is the inverse of AllocatorSettings, for dicts read
// from snapshot pickles: numbers may arrive as int64, int, float64 or
// *big.Int, booleans as bool, and any of them as strings. Missing keys keep
// their defaults, and keys this package does not know are ignored, since
// newer PyTorch versions add keys. The settings string, under
// PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF, only becomes Source: the
// recorded values are the ones in force, so it is not parsed again.
func FromAllocatorSettings(m map[string]any) (Config, error) {
	c := Default()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // so that the first error reported is always the same
	for _, k := range keys {
		v := m[k]
		var err error
		switch k {
		case "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF":
			s, ok := v.(string)
			if !ok {
				err = fmt.Errorf("want a string, got %T", v)
			}
			c.Source = s
		case "max_split_size":
			var n int64
			n, err = asInt64(v)
			c.MaxSplitSize = uint64(n)
		case "garbage_collection_threshold":
			c.GarbageCollectionThreshold, err = asFloat64(v)
		case "pinned_num_register_threads":
			var n int64
			if n, err = asInt64(v); err == nil && n < 0 {
				err = fmt.Errorf("negative count %d", n)
			}
			c.PinnedNumRegisterThreads = uint64(n)
		case "expandable_segments":
			c.ExpandableSegments, err = asBool(v)
		case "release_lock_on_cudamalloc":
			c.ReleaseLockOnCudaMalloc, err = asBool(v)
		case "pinned_use_cuda_host_register":
			c.PinnedUseCudaHostRegister, err = asBool(v)
		case "graph_capture_record_stream_reuse":
			c.GraphCaptureRecordStreamReuse, err = asBool(v)
		case "roundup_power2_divisions":
			err = roundupFromSettings(&c.RoundupPower2Divisions, v)
		}
		if err != nil {
			return Default(), fmt.Errorf("allocator_settings %s: %w", k, err)
		}
	}
	return c, nil
}

func roundupFromSettings(t *[RoundupIntervals]uint64, v any) error {
	set := func(k any, val any) error {
		key := fmt.Sprint(k)
		mb, err := strconv.ParseUint(key, 10, 64)
		if err != nil || !isPow2(mb) || log2(mb) >= RoundupIntervals {
			return fmt.Errorf("unknown interval %q", key)
		}
		n, err := asInt64(val)
		if err != nil {
			return fmt.Errorf("interval %s: %w", key, err)
		}
		if n != 0 && !isPow2(uint64(n)) {
			return fmt.Errorf("interval %s: divisions %d is neither 0 nor a power of 2", key, n)
		}
		t[log2(mb)] = uint64(n)
		return nil
	}
	var err error
	switch m := v.(type) {
	case map[string]int64:
		for k, val := range m {
			err = firstErr(err, set(k, val))
		}
	case map[string]int:
		for k, val := range m {
			err = firstErr(err, set(k, val))
		}
	case map[string]any:
		for k, val := range m {
			err = firstErr(err, set(k, val))
		}
	case map[any]any:
		for k, val := range m {
			err = firstErr(err, set(k, val))
		}
	default:
		return fmt.Errorf("want a dict, got %T", v)
	}
	return err
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func asInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case uint64:
		return int64(n), nil // a size_t read unsigned: same bits as PyTorch's cast
	case float64:
		if n != math.Trunc(n) || n < math.MinInt64 || n >= math.MaxInt64 {
			return 0, fmt.Errorf("%v is not an int64", n)
		}
		return int64(n), nil
	case *big.Int:
		if !n.IsInt64() {
			return 0, fmt.Errorf("%v is not an int64", n)
		}
		return n.Int64(), nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

func asFloat64(v any) (float64, error) {
	switch n := v.(type) {
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case int:
		return float64(n), nil
	case string:
		return strconv.ParseFloat(n, 64)
	}
	return 0, fmt.Errorf("want a number, got %T", v)
}

func asBool(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case int64, int:
		n, _ := asInt64(b)
		if n == 0 || n == 1 {
			return n == 1, nil
		}
		return false, fmt.Errorf("%d is not a boolean", n)
	case string:
		return strconv.ParseBool(b)
	}
	return false, fmt.Errorf("want a boolean, got %T", v)
}

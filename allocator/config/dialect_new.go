package config

import (
	"fmt"
	"strconv"
)

// The new dialect: AcceleratorAllocatorConfig::parseArgs (runGeneric) and
// the CUDA hook CUDAAllocatorConfig::parseArgs (runCUDA) of PyTorch 2.9,
// with the options 2026 main added. As in the old dialect each function
// takes the index of its key and returns the index of the last token used.

// genericKeys are the keys of AcceleratorAllocatorConfig::getKeys(): the
// CUDA pass skips them instead of calling them unknown. The two pinned_max_*
// keys are 2026 host options whose parser was not available; where PyTorch
// parses them is a guess.
var genericKeys = map[string]bool{
	"large_segment_size_mb":         true,
	"max_split_size_mb":             true,
	"max_non_split_rounding_mb":     true,
	"garbage_collection_threshold":  true,
	"roundup_power2_divisions":      true,
	"expandable_segments":           true,
	"pinned_use_background_threads": true,
	"pinned_max_round_threshold_mb": true,
	"pinned_max_cached_size_mb":     true,
}

func (p *parser) runGeneric() error {
	c := p.c
	for i := 0; i < len(p.toks); i++ {
		key := p.tok(i)
		p.option = key
		var err *Error
		switch key {
		case "max_split_size_mb":
			i, err = p.newSizeMB(i, &c.MaxSplitSize)
		case "max_non_split_rounding_mb":
			i, err = p.newSizeMB(i, &c.MaxNonSplitRoundingSize)
		case "large_segment_size_mb":
			i, err = p.newLargeSegment(i)
		case "garbage_collection_threshold":
			i, err = p.newGCThreshold(i)
		case "roundup_power2_divisions":
			i, err = p.newRoundup(i)
		case "expandable_segments":
			i, err = p.newBool(i, &c.ExpandableSegments)
		case "pinned_use_background_threads":
			i, err = p.newBool(i, &c.PinnedUseBackgroundThreads)
		case "pinned_max_round_threshold_mb":
			i, err = p.newUint(i, &c.PinnedMaxRoundThresholdMB)
		case "pinned_max_cached_size_mb":
			i, err = p.newUint(i, &c.PinnedMaxCachedSizeMB)
		default:
			// The CUDA pass decides whether the key exists.
			i, err = p.skipKey(i)
		}
		if err != nil {
			return err
		}
		// checkToken(++i, ",") returns a bool nobody reads and only
		// asserts that the token exists, which it does here.
		if i+1 < len(p.toks) {
			i++
		}
	}
	return nil
}

func (p *parser) runCUDA() error {
	c := p.c
	for i := 0; i < len(p.toks); i++ {
		key := p.tok(i)
		p.option = key
		var err *Error
		switch key {
		case "backend":
			i, err = p.newBackend(i)
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc":
			i, err = p.newBool(i, &c.ReleaseLockOnCudaMalloc)
		case "pinned_use_cuda_host_register", "pinned_use_hip_host_register":
			i, err = p.newBool(i, &c.PinnedUseCudaHostRegister)
		case "pinned_num_register_threads":
			i, err = p.newRegisterThreads(i)
		case "pinned_reserve_segment_size_mb":
			i, err = p.newReserveSegment(i)
		case "graph_capture_record_stream_reuse":
			i, err = p.newBool(i, &c.GraphCaptureRecordStreamReuse)
		case "per_process_memory_fraction":
			i, err = p.newMemoryFraction(i)
		case "pinned_free_catch_all":
			i, err = p.newBool(i, &c.PinnedFreeCatchAll)
		case "throw_on_cudamalloc_oom":
			i, err = p.newBool(i, &c.ThrowOnCudaMallocOOM)
		case "expandable_segments_reserve":
			i, err = p.newReserve(i)
		case "expandable_segments_reserve_by_class":
			i, err = p.newReserveByClass(i)
		default:
			if !genericKeys[key] {
				return p.fail(i, "Unrecognized key '"+key+"' in CUDA allocator config.")
			}
			i, err = p.skipKey(i)
		}
		if err != nil {
			return err
		}
		if i+1 < len(p.toks) {
			i++
		}
	}
	return nil
}

// newSizeValue is checkToken(++i, ":") then toSizeT(++i).
func (p *parser) newSizeValue(i int) (int, uint64, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, 0, err
	}
	v, err := p.toSizeT(i)
	return i, v, err
}

// newDoubleValue is checkToken(++i, ":") then toDouble(++i).
func (p *parser) newDoubleValue(i int) (int, float64, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, 0, err
	}
	v, err := p.toDouble(i)
	return i, v, err
}

func (p *parser) newUint(i int, dst *uint64) (int, *Error) {
	i, v, err := p.newSizeValue(i)
	if err == nil {
		*dst = v
	}
	return i, err
}

// newSizeMB parses max_split_size_mb and max_non_split_rounding_mb: at least
// 20 (kLargeBuffer in MB), clamped, times 1 MiB.
func (p *parser) newSizeMB(i int, dst *uint64) (int, *Error) {
	i, v, err := p.newSizeValue(i)
	if err != nil {
		return i, err
	}
	if v < 20 {
		return i, p.fail(i, "CachingAllocator option "+p.option+" too small, must be >= 20")
	}
	*dst = min(v, maxMB) * MiB
	return i, nil
}

// newLargeSegment parses large_segment_size_mb: more than 10 (kMinLargeAlloc
// in MB), clamped, times 1 MiB.
func (p *parser) newLargeSegment(i int) (int, *Error) {
	i, v, err := p.newSizeValue(i)
	if err != nil {
		return i, err
	}
	if v <= 10 {
		return i, p.fail(i, "CachingAllocator option large_segment_size_mb must be > 10 MB")
	}
	p.c.LargeSegmentSize = min(v, maxMB) * MiB
	return i, nil
}

func (p *parser) newGCThreshold(i int) (int, *Error) {
	i, v, err := p.newDoubleValue(i)
	if err != nil {
		return i, err
	}
	if !(v > 0 && v < 1.0) {
		return i, p.fail(i, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
	}
	p.c.GarbageCollectionThreshold = v
	return i, nil
}

func (p *parser) newMemoryFraction(i int) (int, *Error) {
	i, v, err := p.newDoubleValue(i)
	if err != nil {
		return i, err
	}
	if !(v >= 0 && v <= 1.0) {
		return i, p.fail(i, "per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
	}
	p.c.PerProcessMemoryFraction = v
	return i, nil
}

func (p *parser) newRoundup(i int) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	t := &p.c.RoundupPower2Divisions
	if p.tok(i) != "[" {
		v, err := p.toSizeT(i)
		if err != nil {
			return i, err
		}
		if !isPow2(v) {
			return i, p.fail(i, "For roundups, the divisions has to be power of 2 ")
		}
		fillRoundup(t, 0, RoundupIntervals, v)
		return i, nil
	}
	last, first := 0, true
	for i++; p.has(i) && p.tok(i) != "]"; i++ {
		key := i
		if err := p.need(i + 1); err != nil {
			return i + 1, err
		}
		i += 2
		v, err := p.toSizeT(i)
		if err != nil {
			return i, err
		}
		if v != 0 && !isPow2(v) {
			return i, p.fail(i, "For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
		}
		if p.tok(key) == ">" {
			// From last_index + 1: the last explicit entry keeps its value.
			fillRoundup(t, last+1, RoundupIntervals, v)
		} else {
			k, err := p.toSizeT(key)
			if err != nil {
				return i, err
			}
			if !isPow2(k) {
				return i, p.fail(key, "For roundups, the intervals have to be power of 2 ")
			}
			idx := roundupIndex(k)
			if first {
				fillRoundup(t, 0, idx, v)
				first = false
			}
			t[idx] = v
			last = idx
		}
		if err := p.need(i + 1); err != nil {
			return i + 1, err
		}
		if p.tok(i+1) != "]" {
			i++ // the "," is not checked, only its existence
		}
	}
	if !p.has(i) {
		return i, p.fail(i, "Expected closing bracket ']' in ConfigTokenizer but reached end of config")
	}
	return i, nil
}

func (p *parser) newBackend(i int) (int, *Error) {
	i, err := p.valueAt(i)
	if err != nil {
		return i, err
	}
	v := p.tok(i)
	if v != BackendNative && v != BackendCudaMallocAsync {
		return i, p.fail(i, "Unknown allocator backend, options are native and cudaMallocAsync")
	}
	if v != p.c.Backend {
		return i, p.fail(i, "Allocator backend parsed at runtime != allocator backend parsed at load time, "+v+" != "+p.c.Backend)
	}
	return i, nil
}

func (p *parser) newRegisterThreads(i int) (int, *Error) {
	i, v, err := p.newSizeValue(i)
	if err != nil {
		return i, err
	}
	if !isPow2(v) {
		return i, p.fail(i, "Number of register threads has to be power of 2, got "+strconv.FormatUint(v, 10))
	}
	if v > maxRegisterThreads {
		return i, p.fail(i, fmt.Sprintf("Number of register threads should be less than or equal to %d, got %d", maxRegisterThreads, v))
	}
	p.c.PinnedNumRegisterThreads = v
	return i, nil
}

func (p *parser) newReserveSegment(i int) (int, *Error) {
	i, v, err := p.newSizeValue(i)
	if err != nil {
		return i, err
	}
	if v == 0 {
		return i, p.fail(i, "Pinned reserve segment size has to be greater than 0")
	}
	p.c.PinnedReserveSegmentSizeMB = v
	return i, nil
}

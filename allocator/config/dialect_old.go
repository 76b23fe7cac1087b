package config

import "strconv"

// The old dialect: CUDAAllocatorConfig::parseArgs as of PyTorch 2.8 (the
// last hand-written per-CUDA parser). Each function takes the index of its
// key and returns the index of the last token it used, as the C++ does.

func (p *parser) runOld() error {
	c := p.c
	for i := 0; i < len(p.toks); i++ {
		key := p.tok(i)
		p.option = key
		var err *Error
		switch key {
		case "max_split_size_mb":
			i, err = p.oldSizeMB(i, &c.MaxSplitSize)
		case "max_non_split_rounding_mb":
			i, err = p.oldSizeMB(i, &c.MaxNonSplitRoundingSize)
		case "garbage_collection_threshold":
			i, err = p.oldGCThreshold(i)
		case "roundup_power2_divisions":
			i, err = p.oldRoundup(i)
		case "backend":
			i, err = p.oldBackend(i)
		// These two were parsed inline, without the "Error, expecting"
		// branch; the hip spellings are accepted because hipify rewrites
		// cuda to hip in ROCm builds.
		case "expandable_segments":
			i, err = p.oldBool(i, "expandable_segments", false, &c.ExpandableSegments)
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc":
			i, err = p.oldBool(i, "release_lock_on_cudamalloc", false, &c.ReleaseLockOnCudaMalloc)
		case "pinned_use_cuda_host_register", "pinned_use_hip_host_register":
			i, err = p.oldBool(i, "pinned_use_cuda_host_register", true, &c.PinnedUseCudaHostRegister)
		case "pinned_use_background_threads":
			i, err = p.oldBool(i, key, true, &c.PinnedUseBackgroundThreads)
		case "graph_capture_record_stream_reuse":
			i, err = p.oldBool(i, key, true, &c.GraphCaptureRecordStreamReuse)
		case "pinned_num_register_threads":
			i, err = p.oldRegisterThreads(i)
		case "pinned_reserve_segment_size_mb":
			i, err = p.oldReserveSegment(i)
		default:
			return p.fail(i, "Unrecognized CachingAllocator option: "+key)
		}
		if err != nil {
			return err
		}
		if i+1 < len(p.toks) {
			i++
			if err := p.oldConsume(i, ","); err != nil {
				return err
			}
		}
	}
	return nil
}

// oldConsume is consumeToken: token i must exist and be sep.
func (p *parser) oldConsume(i int, sep string) *Error {
	if p.tok(i) != sep {
		return p.fail(i, "Error parsing CachingAllocator settings, expected "+sep)
	}
	return nil
}

// oldValue consumes ":" after the key at i and returns the value's index,
// or the "Error, expecting <option> value" failure when there is none.
func (p *parser) oldValue(i int, missing string) (int, *Error) {
	i++
	if err := p.oldConsume(i, ":"); err != nil {
		return i, err
	}
	i++
	if !p.has(i) {
		return i, p.fail(i, missing)
	}
	return i, nil
}

// oldStoi reads token i with stoi and converts it to size_t, as the C++
// assigns the int to a size_t.
func (p *parser) oldStoi(i int) (uint64, *Error) {
	v, ne := stoi(p.tok(i))
	if ne != nil {
		return 0, p.failNum(i, ne)
	}
	return uint64(v), nil
}

// oldSizeMB parses max_split_size_mb and max_non_split_rounding_mb: stoi,
// more than 20 (kLargeBuffer in MB), clamped, times 1 MiB.
func (p *parser) oldSizeMB(i int, dst *uint64) (int, *Error) {
	i, err := p.oldValue(i, "Error, expecting "+p.option+" value")
	if err != nil {
		return i, err
	}
	v, err := p.oldStoi(i)
	if err != nil {
		return i, err
	}
	if v <= 20 {
		return i, p.fail(i, "CachingAllocator option "+p.option+" too small, must be > 20")
	}
	*dst = min(v, maxMB) * MiB
	return i, nil
}

func (p *parser) oldGCThreshold(i int) (int, *Error) {
	i, err := p.oldValue(i, "Error, expecting garbage_collection_threshold value")
	if err != nil {
		return i, err
	}
	v, ne := stod(p.tok(i))
	if ne != nil {
		return i, p.failNum(i, ne)
	}
	// Written as two negated checks so that NaN is "too small", as in C++.
	if !(v > 0) {
		return i, p.fail(i, "garbage_collect_threshold too small, set it 0.0~1.0")
	}
	if !(v < 1.0) {
		return i, p.fail(i, "garbage_collect_threshold too big, set it 0.0~1.0")
	}
	p.c.GarbageCollectionThreshold = v
	return i, nil
}

func (p *parser) oldRoundup(i int) (int, *Error) {
	i, err := p.oldValue(i, "Error, expecting roundup_power2_divisions value")
	if err != nil {
		return i, err
	}
	t := &p.c.RoundupPower2Divisions
	if p.tok(i) != "[" {
		v, err := p.oldStoi(i)
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
	// An unclosed list simply ends with the input: the loop condition
	// runs out of tokens and nothing complains.
	for i++; p.has(i) && p.tok(i) != "]"; i++ {
		key := i
		i++
		if err := p.oldConsume(i, ":"); err != nil {
			return i, err
		}
		i++
		if !p.has(i) {
			return i, p.fail(i, "Error parsing roundup_power2_divisions value")
		}
		v, err := p.oldStoi(i)
		if err != nil {
			return i, err
		}
		if v != 0 && !isPow2(v) {
			return i, p.fail(i, "For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
		}
		if p.tok(key) == ">" {
			// From last_index itself: the last explicit entry is
			// overwritten.
			fillRoundup(t, last, RoundupIntervals, v)
		} else {
			k, ne := stoull(p.tok(key), "stoul")
			if ne != nil {
				return i, p.failNum(key, ne)
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
		// The C++ reads config[i + 1] without a bounds check here; past
		// the end that is undefined behaviour, taken here as "not ]" (tok
		// is "" there), so consumeToken reports the missing ",".
		if p.tok(i+1) != "]" {
			i++
			if err := p.oldConsume(i, ","); err != nil {
				return i, err
			}
		}
	}
	return i, nil
}

func (p *parser) oldBackend(i int) (int, *Error) {
	i, err := p.oldValue(i, "Error parsing backend value")
	if err != nil {
		return i, err
	}
	v := p.tok(i)
	if v != BackendNative && v != BackendCudaMallocAsync {
		return i, p.fail(i, "Unknown allocator backend, options are native and cudaMallocAsync")
	}
	if v != p.c.Backend {
		return i, p.fail(i, "Allocator backend parsed at runtime != allocator backend parsed at load time")
	}
	return i, nil
}

// oldBool parses a True/False option. name is the spelling used in the
// messages (the cuda one even for a hip key). Options parsed by their own
// function (withMissing) have an "Error, expecting" branch; the inline ones
// report a missing value with the True/False message.
func (p *parser) oldBool(i int, name string, withMissing bool, dst *bool) (int, *Error) {
	bad := "Expected a single True/False argument for " + name
	i++
	if err := p.oldConsume(i, ":"); err != nil {
		return i, err
	}
	i++
	if !p.has(i) {
		if withMissing {
			return i, p.fail(i, "Error, expecting "+name+" value")
		}
		return i, p.fail(i, bad)
	}
	switch p.tok(i) {
	case "True":
		*dst = true
	case "False":
		*dst = false
	default:
		return i, p.fail(i, bad)
	}
	return i, nil
}

func (p *parser) oldRegisterThreads(i int) (int, *Error) {
	i, err := p.oldValue(i, "Error, expecting pinned_num_register_threads value")
	if err != nil {
		return i, err
	}
	v, err := p.oldStoi(i)
	if err != nil {
		return i, err
	}
	if !isPow2(v) {
		return i, p.fail(i, "Number of register threads has to be power of 2 ")
	}
	if v > maxRegisterThreads {
		return i, p.fail(i, "Number of register threads should be less than or equal to "+strconv.Itoa(maxRegisterThreads))
	}
	p.c.PinnedNumRegisterThreads = v
	return i, nil
}

func (p *parser) oldReserveSegment(i int) (int, *Error) {
	i, err := p.oldValue(i, "Error, expecting pinned_reserve_segment_size_mb value")
	if err != nil {
		return i, err
	}
	v, err := p.oldStoi(i)
	if err != nil {
		return i, err
	}
	if v == 0 {
		return i, p.fail(i, "Pinned reserve segment size has to be greater than 0 ")
	}
	p.c.PinnedReserveSegmentSizeMB = v
	return i, nil
}

// maxRegisterThreads is pinned_max_register_threads().
const maxRegisterThreads = 128

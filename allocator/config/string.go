package config

import (
	"strconv"
	"strings"
)

// String returns a settings string that reproduces c when parsed from the
// defaults: only the options that differ from Default, always in the same
// order, each written so that both dialects read it back to the same value
// where the dialect can express it at all (the old dialect rejects the
// options it does not know, and max_split_size_mb:20).
func (c Config) String() string {
	d := Default()
	var opts []string
	add := func(key, val string) { opts = append(opts, key+":"+val) }
	flag := func(key string, v bool) {
		if v {
			add(key, "True")
		}
	}
	if c.Backend != d.Backend {
		add("backend", c.Backend)
	}
	if c.MaxSplitSize != d.MaxSplitSize {
		add("max_split_size_mb", mbString(c.MaxSplitSize))
	}
	if c.MaxNonSplitRoundingSize != d.MaxNonSplitRoundingSize {
		add("max_non_split_rounding_mb", mbString(c.MaxNonSplitRoundingSize))
	}
	if c.RoundupPower2Divisions != d.RoundupPower2Divisions {
		add("roundup_power2_divisions", roundupString(&c.RoundupPower2Divisions))
	}
	if c.GarbageCollectionThreshold != d.GarbageCollectionThreshold {
		add("garbage_collection_threshold", floatString(c.GarbageCollectionThreshold))
	}
	flag("expandable_segments", c.ExpandableSegments)
	flag("release_lock_on_cudamalloc", c.ReleaseLockOnCudaMalloc)
	if c.PerProcessMemoryFraction != d.PerProcessMemoryFraction {
		add("per_process_memory_fraction", floatString(c.PerProcessMemoryFraction))
	}
	if c.LargeSegmentSize != d.LargeSegmentSize {
		add("large_segment_size_mb", mbString(c.LargeSegmentSize))
	}
	flag("graph_capture_record_stream_reuse", c.GraphCaptureRecordStreamReuse)
	flag("throw_on_cudamalloc_oom", c.ThrowOnCudaMallocOOM)
	if c.ExpandableSegmentsReserve != "" {
		add("expandable_segments_reserve", c.ExpandableSegmentsReserve)
	}
	if c.ExpandableSegmentsReserveByClass != "" {
		add("expandable_segments_reserve_by_class", "["+c.ExpandableSegmentsReserveByClass+"]")
	}
	flag("pinned_use_cuda_host_register", c.PinnedUseCudaHostRegister)
	if c.PinnedNumRegisterThreads != d.PinnedNumRegisterThreads {
		add("pinned_num_register_threads", sizeString(c.PinnedNumRegisterThreads))
	}
	flag("pinned_use_background_threads", c.PinnedUseBackgroundThreads)
	if c.PinnedReserveSegmentSizeMB != d.PinnedReserveSegmentSizeMB {
		add("pinned_reserve_segment_size_mb", sizeString(c.PinnedReserveSegmentSizeMB))
	}
	flag("pinned_free_catch_all", c.PinnedFreeCatchAll)
	if c.PinnedMaxRoundThresholdMB != d.PinnedMaxRoundThresholdMB {
		add("pinned_max_round_threshold_mb", sizeString(c.PinnedMaxRoundThresholdMB))
	}
	if c.PinnedMaxCachedSizeMB != d.PinnedMaxCachedSizeMB {
		add("pinned_max_cached_size_mb", sizeString(c.PinnedMaxCachedSizeMB))
	}
	return strings.Join(opts, ",")
}

// mbString writes a size that was given in MB. The clamped maximum is
// written as -1: stoi would reject its decimal form, while both stoi (via
// the size_t conversion) and stoull turn -1 into SIZE_MAX, which clamps back
// to it.
func mbString(v uint64) string {
	if v/MiB == maxMB {
		return "-1"
	}
	return strconv.FormatUint(v/MiB, 10)
}

// sizeString writes a size_t so that stoi reads it back too where it can:
// values at or above 2^63 can only have come from a negative number.
func sizeString(v uint64) string {
	if int64(v) < 0 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatUint(v, 10)
}

// floatString is the shortest decimal that strtod reads back exactly.
func floatString(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// roundupString writes the table as the single value when all entries are
// the same, and otherwise as a list that fills it the same way in both
// dialects: the first entry sits at the end of the leading run (the first K
// fills everything below it), zeros in between are left to the reset, and a
// trailing run is written as its first entry followed by ">" with the same
// value, so it does not matter whether ">" starts at that entry (old) or
// after it (new).
func roundupString(t *[RoundupIntervals]uint64) string {
	lead := 0
	for lead+1 < RoundupIntervals && t[lead+1] == t[0] {
		lead++
	}
	if lead == RoundupIntervals-1 {
		return sizeString(t[0])
	}
	tail := RoundupIntervals - 1
	for t[tail-1] == t[RoundupIntervals-1] {
		tail--
	}
	entry := func(i int) string { return strconv.FormatUint(1<<i, 10) + ":" + sizeString(t[i]) }
	parts := []string{entry(lead)}
	for i := lead + 1; i < tail; i++ {
		if t[i] != 0 {
			parts = append(parts, entry(i))
		}
	}
	if t[tail] != 0 {
		parts = append(parts, entry(tail))
		if tail < RoundupIntervals-1 {
			parts = append(parts, ">:"+sizeString(t[tail]))
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

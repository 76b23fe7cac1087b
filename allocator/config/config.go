// Package config holds the caching allocator's settings and parses them from
// PyTorch's PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF syntax, with
// PyTorch's options, defaults, reset-on-parse rules and error messages
// (docs/pytorch-caching-allocator.md section 6).
package config

import (
	"math"
	"math/bits"
)

// Sizes the settings are expressed in.
const (
	MiB = 1 << 20

	// Unlimited is the value of MaxSplitSize when max_split_size_mb is not
	// set (SIZE_MAX in PyTorch; it shows as -1 in memory_stats).
	Unlimited = math.MaxUint64

	// RoundupIntervals is the number of entries of the
	// roundup_power2_divisions table (kRoundUpPowerOfTwoIntervals): entry
	// i covers sizes in [2^(20+i), 2^(21+i)), entry 0 everything below
	// 2 MiB and entry 15 everything from 32 GiB.
	RoundupIntervals = 16
)

// Dialect selects which generation of PyTorch's parser to follow where they
// differ (error texts, the max_split_size_mb lower bound and how `>` fills
// the roundup table).
type Dialect int

const (
	// DialectNew is the unified AcceleratorAllocatorConfig parser of
	// PyTorch 2.9 and later (the default).
	DialectNew Dialect = iota
	// DialectOld is the per-CUDA CUDAAllocatorConfig parser of PyTorch
	// 2.0 to 2.8.
	DialectOld
)

// Config is the full set of allocator settings. The zero value is not
// useful; start from Default.
type Config struct {
	// Backend is "native" or "cudaMallocAsync".
	Backend string
	// MaxSplitSize in bytes; Unlimited when not set. Blocks at least this
	// large are never split, and requests below it never take them.
	MaxSplitSize uint64
	// MaxNonSplitRoundingSize is the slack allowed when an oversize
	// request reuses a larger cached block (default 20 MiB).
	MaxNonSplitRoundingSize uint64
	// RoundupPower2Divisions is the table read by round_size; 0 and 1 both
	// mean plain 512-byte rounding.
	RoundupPower2Divisions [RoundupIntervals]uint64
	// GarbageCollectionThreshold is in (0, 1), 0 when off. It has effect
	// only when a memory fraction is set.
	GarbageCollectionThreshold float64
	// ExpandableSegments maps pages into per-stream virtual ranges instead
	// of calling cudaMalloc per segment.
	ExpandableSegments bool
	// ReleaseLockOnCudaMalloc releases the allocator mutex around the
	// device allocation; no effect on decisions.
	ReleaseLockOnCudaMalloc bool
	// PerProcessMemoryFraction in [0, 1] (2.9+ option); 1 means no limit.
	PerProcessMemoryFraction float64
	// LargeSegmentSize is the segment size for 1-10 MiB requests and the
	// page size of large expandable segments (20 MiB; 2026 option).
	LargeSegmentSize uint64
	// GraphCaptureRecordStreamReuse is accepted and recorded; CUDA graphs
	// are not modelled.
	GraphCaptureRecordStreamReuse bool
	// ThrowOnCudaMallocOOM is accepted and recorded (2026 option).
	ThrowOnCudaMallocOOM bool

	// Host (pinned-memory) allocator options: parsed, validated and kept so
	// that a settings string round-trips; they do not affect the device
	// allocator.
	PinnedUseCudaHostRegister  bool
	PinnedNumRegisterThreads   uint64
	PinnedUseBackgroundThreads bool
	PinnedReserveSegmentSizeMB uint64
	// 2026 host options. PinnedMaxRoundThresholdMB and PinnedMaxCachedSizeMB
	// are 0 when not set; their parser was not available, so they are read
	// as plain unsigned integers.
	PinnedFreeCatchAll        bool
	PinnedMaxRoundThresholdMB uint64
	PinnedMaxCachedSizeMB     uint64

	// ExpandableSegmentsReserve is the last valid expandable_segments_reserve
	// value as written ("0.5" is a fraction of device memory, "40G" an
	// absolute size); "" when unset. PyTorch ignores a malformed value with
	// a warning, and so does Apply.
	ExpandableSegmentsReserve string
	// ExpandableSegmentsReserveByClass holds the valid entries of the last
	// expandable_segments_reserve_by_class list as "name:value" pairs sorted
	// by name and joined by ","; "" when unset or empty. A string keeps
	// Config comparable with ==.
	ExpandableSegmentsReserveByClass string

	// Dialect is the parser generation used by Apply.
	Dialect Dialect
	// Source is the last settings string applied ("" for the defaults).
	Source string
	// EnvVar names the environment variable FromEnv took Source from ("" if
	// none), so that callers can warn about the deprecated
	// PYTORCH_CUDA_ALLOC_CONF and PYTORCH_HIP_ALLOC_CONF.
	EnvVar string
}

// Default returns PyTorch's defaults.
func Default() Config {
	return Config{
		Backend:                  "native",
		MaxSplitSize:             Unlimited,
		MaxNonSplitRoundingSize:  20 * MiB,
		PerProcessMemoryFraction: 1,
		LargeSegmentSize:         20 * MiB,
		PinnedNumRegisterThreads: 1,
	}
}

// RoundupDivisions returns the table entry for a request of size bytes
// (roundup_power2_divisions(size) in PyTorch).
func (c *Config) RoundupDivisions(size uint64) uint64 {
	return c.RoundupPower2Divisions[RoundupIndex(size)]
}

// RoundupIndex is floor(log2(size)) - 20 clamped to [0, 15].
func RoundupIndex(size uint64) int {
	i := bits.Len64(size) - 1 - 20
	if i < 0 {
		return 0
	}
	if i > RoundupIntervals-1 {
		return RoundupIntervals - 1
	}
	return i
}

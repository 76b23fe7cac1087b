package allocator

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/memreplay/memreplay/allocator/config"
)

// Sizes from PyTorch's CUDACachingAllocator (docs/pytorch-caching-allocator.md
// section 1.1).
const (
	MinBlockSize  = 512             // kMinBlockSize: every block is a multiple of it
	SmallSize     = 1 << 20         // kSmallSize: largest request of the small pool
	SmallBuffer   = 2 << 20         // kSmallBuffer: small-pool segment and page size
	MinLargeAlloc = 10 << 20        // kMinLargeAlloc: below it a large request gets LargeBuffer
	RoundLarge    = 2 << 20         // kRoundLarge: larger segments are multiples of it
	LargeBuffer   = 20 << 20        // kLargeBuffer: default large segment and page size
	maxRequest    = uint64(1) << 60 // requests from here fail before malloc ("more than 1EB")
)

// Policy is the seam where the allocator's size decisions live. PyTorch is
// the default and the reference; another policy may round, size segments or
// split differently to strand fewer bytes, and everything else (best fit,
// merging, the fallback chain, statistics) stays the same.
type Policy interface {
	// Name identifies the policy in reports.
	Name() string
	// RoundSize is the block size carved out for a request.
	RoundSize(cfg *config.Config, size uint64) uint64
	// AllocationSize is how much to ask the device for when no cached block
	// fits a rounded size.
	AllocationSize(cfg *config.Config, size uint64) uint64
	// ShouldSplit says whether a free block of blockSize serving size bytes
	// is split, leaving the tail cached.
	ShouldSplit(cfg *config.Config, blockSize, size uint64, small bool) bool
}

// A policy may do more than size blocks: it may keep long-lived blocks in
// pools of their own (Lifetime) or stitch free pages into new ranges
// (Stitch). Those mechanisms live in the allocator, behind fields that New
// sets once from the policy's engine method, so that PyTorch's path only
// tests a nil pointer or a false flag. engine is unexported: only the
// policies of this package switch mechanisms on; a policy from elsewhere
// changes sizes only.
type policyEngine interface {
	// engine switches the policy's mechanisms on in a new allocator; it
	// may adjust the settings before they are validated.
	engine(a *Allocator, cfg *config.Config) error
}

// PolicyNames lists the policies NewPolicy knows, the default first.
func PolicyNames() []string { return []string{"pytorch", "stitch", "lifetime", "plan"} }

// NewPolicy returns the policy called name ("" is pytorch). A policy holds
// no state of its own (the allocator keeps it), so one value may serve
// several allocators.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "", "pytorch":
		return PyTorch{}, nil
	case "stitch":
		return Stitch{}, nil
	case "lifetime":
		return Lifetime{}, nil
	case "plan":
		return Plan{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want %s)", name, strings.Join(PolicyNames(), ", "))
}

// PyTorch is PyTorch's policy, decision for decision.
type PyTorch struct{}

// Name implements Policy.
func (PyTorch) Name() string { return "pytorch" }

// RoundSize implements round_size: at least 512 bytes, then either 512-byte
// rounding or, when the roundup_power2_divisions entry for the size is above
// 1 and the size above 512 times it, rounding up to the next 1/divisions step
// of the size's power-of-two interval. The guard means that small sizes
// are never power-rounded (1200 with 4 divisions gives 1536, not the 1280
// the PyTorch docs show).
func (PyTorch) RoundSize(cfg *config.Config, size uint64) uint64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	div := cfg.RoundupDivisions(size)
	if div > 1 && size > MinBlockSize*div {
		return roundupPower2NextDivision(size, div)
	}
	return (size + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

func roundupPower2NextDivision(size, divisions uint64) uint64 {
	if size&(size-1) == 0 {
		return size
	}
	floor2 := uint64(1) << (bits.Len64(size) - 1)
	step := floor2 >> (bits.Len64(divisions) - 1)
	if step == 0 {
		return floor2 << 1
	}
	down := size &^ (step - 1)
	if down == size {
		return size
	}
	return down + step
}

// AllocationSize implements get_allocation_size: 2 MiB for the small pool,
// the large segment size (20 MiB) below 10 MiB, else the size rounded up to
// 2 MiB.
func (PyTorch) AllocationSize(cfg *config.Config, size uint64) uint64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return cfg.LargeSegmentSize
	default:
		return (size + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

// ShouldSplit implements should_split. The test is on the global
// expandable_segments flag, not on the block: with it on, large blocks of
// ordinary segments split by the 512-byte rule too.
func (PyTorch) ShouldSplit(cfg *config.Config, blockSize, size uint64, small bool) bool {
	remaining := blockSize - size
	if small || cfg.ExpandableSegments {
		return remaining >= MinBlockSize
	}
	return size < cfg.MaxSplitSize && remaining > SmallSize
}

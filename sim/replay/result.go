package replay

import (
	"fmt"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/trace"
)

// OOMPolicy says what a replay does when its allocator runs out of memory
// where the recording did not.
type OOMPolicy int

const (
	// OOMStop ends the replay at the first OOM (the default, what an
	// unprotected training job does).
	OOMStop OOMPolicy = iota
	// OOMSkip skips the failed allocation and, later, its frees.
	OOMSkip
	// OOMDropTrial frees every live block of the current trial and skips
	// the trial's remaining events, as the BERT-family study's pruning of OOM trials
	// does. A trace without trial markers is one trial per device.
	OOMDropTrial
)

var oomPolicyNames = [...]string{"stop", "skip", "drop-trial"}

func (p OOMPolicy) String() string {
	if int(p) < len(oomPolicyNames) {
		return oomPolicyNames[p]
	}
	return fmt.Sprintf("OOMPolicy(%d)", int(p))
}

// ParseOOMPolicy reads "stop", "skip" or "drop-trial".
func ParseOOMPolicy(s string) (OOMPolicy, error) {
	for i, n := range oomPolicyNames {
		if n == s {
			return OOMPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown OOM policy %q (want stop, skip or drop-trial)", s)
}

// Result is what a replay did.
type Result struct {
	// Events is the number of trace events read, skipped ones included.
	Events int64
	// Config is the allocator configuration replayed, and ConfigSource
	// where it came from ("trace", "override", "default").
	Config       config.Config
	ConfigSource string
	// Policy is the allocator policy's name ("pytorch" by default).
	Policy  string
	Devices []DeviceResult
	// OOMs lists the replay's out-of-memory failures in order.
	OOMs []OOM
	// Stopped is set when the OOM policy ended the replay at event
	// StoppedAt.
	Stopped   bool
	StoppedAt int64
	// Skipped counts events skipped: bad events under Lenient, and the
	// events the OOM policy skipped. Problems keeps the first few reasons.
	Skipped  int64
	Problems []string
	// UnknownFrees counts, among the skipped events, the frees (or
	// completions) of addresses the trace never allocated and its state
	// before the first event does not explain.
	UnknownFrees int64
	// Reconstructed describes the state rebuilt before the first event of
	// a partial trace; nil for a trace recorded from the start.
	Reconstructed *Reconstruction
	// Check is set when Options.Check was.
	Check *CheckResult
	// StatsCheck is set when Options.ExpectStats was.
	StatsCheck *StatsCheck
}

// DeviceResult is one device's end state.
type DeviceResult struct {
	Index int32
	// Capacity is the device's memory and CapacitySource why: "option",
	// "trace header", "implied by oom at event N", "unknown" for a
	// simulated device; "device memory" (all of it) or "option" (a limit)
	// for a real one.
	Capacity       uint64
	CapacitySource string
	// UnusedCapacity, with CapacitySource "unknown" under Check, is the
	// capacity the trace's oom entries imply, which only a replay without
	// Check uses ("21.94 GiB implied by the oom at event 1234"); "" when
	// the trace implies none.
	UnusedCapacity string
	// Name names a real device ("NVIDIA H200, cuda:0"); empty when
	// simulated.
	Name     string
	Stats    allocator.Stats
	Counters gpu.Counters
	// TimeMeasured says that Counters' times were measured (a real GPU),
	// not modelled by the simulator's cost model.
	TimeMeasured bool
	Final        allocator.Snapshot
	// Mallocs and MallocNS are the trace's mallocs and their wall time in
	// the allocator, with Options.TimeMallocs (0 otherwise).
	Mallocs, MallocNS int64
}

// OOM is one failed allocation of the replay.
type OOM struct {
	Index  int64 // event index
	Device int32
	Size   uint64 // the request
	// Recorded is set when the trace recorded an OOM here too.
	Recorded bool
	Message  string // PyTorch's message
}

// CheckResult compares the replay's decisions with the recording
// allocator's (DESIGN.md's contract). A decision is a recorded
// segment_alloc, segment_free, segment_map, segment_unmap or oom entry, or
// the address an alloc entry was given.
type CheckResult struct {
	DecisionsExpected int64
	DecisionsMatched  int64
	FirstDivergence   *Divergence
	// FinalSegmentsMatch compares the final layout (segments and their
	// blocks: address, size, state) with the trace's final segments; nil
	// when the trace has none.
	FinalSegmentsMatch *bool
	// FinalDifference describes the first difference of the final layout.
	FinalDifference string
	// NothingToCheck says the trace holds nothing to compare: no decision
	// entry, and no final state with alloc entries whose addresses it
	// would place (a state-only or legacy snapshot, an RMM log, a
	// generated trace). The counts are then zero; Passed is false, and
	// neither a pass nor a failure is meant. FinalSegmentsMatch is still
	// set when the trace has an end state: that the state rebuilt before
	// the first event leads to it, a consistency check of the import.
	NothingToCheck bool
}

// NothingToCheckMessage says why a check had nothing to compare, as the
// reports print it.
const NothingToCheckMessage = "nothing to check: the trace records no decision of a caching allocator " +
	"(segment or oom entry) and no end state to compare with"

// Checkable says whether a check has anything to compare in a trace from
// source with that many decision and alloc entries and an end state of
// finalSegments segments (0 also when it has none): recorded decisions, or
// alloc addresses placed by the allocator whose end state the trace holds.
// An empty end state does not count: with allocs and no decision entry, a
// recording allocator would have left the segments that held them (or
// recorded their segment_free), so the list is empty because nothing was
// recorded, as in a generated trace written as a snapshot (convert
// trial.mrt trial.pickle). inspect answers with it too.
func Checkable(source string, decisions, allocs int64, finalSegments int) bool {
	if source == trace.SourceRMM {
		// Its oom entries are RMM's memory resource failing, not a
		// caching allocator's decision.
		return false
	}
	return decisions > 0 || (finalSegments > 0 && allocs > 0)
}

// Passed reports whether every decision and the final layout matched, and
// there was something to compare (NothingToCheck).
func (c *CheckResult) Passed() bool {
	return !c.NothingToCheck && c.FirstDivergence == nil && c.DecisionsMatched == c.DecisionsExpected &&
		(c.FinalSegmentsMatch == nil || *c.FinalSegmentsMatch)
}

// Divergence is the first decision that differed.
type Divergence struct {
	Index    int64 // event index of the recorded decision (or of the input the replay was serving)
	Device   int32
	Expected string
	Actual   string
}

func (d *Divergence) String() string {
	return fmt.Sprintf("device %d, event %d: expected %s, got %s", d.Device, d.Index, d.Expected, d.Actual)
}

// Reconstruction summarises the state rebuilt before a partial trace.
type Reconstruction struct {
	Segments      int    // segments that existed before the first event
	SegmentBytes  uint64 // their bytes
	LiveBlocks    int    // blocks live before the first event
	LiveBytes     uint64
	Unresolved    int // blocks freed inside expandable runs the restore cannot rebuild, given a segment each
	InferredSizes int // live blocks whose size was inferred from their requested size
	// Placed says that a policy other than PyTorch's placed the live
	// blocks itself, largest first, instead of the recorded segments
	// being rebuilt.
	Placed bool
	Notes  []string
}

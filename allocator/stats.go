package allocator

import (
	"sort"
	"strconv"
	"strings"
)

// Stat is one PyTorch statistic: its current value, the peak since the last
// ResetPeakStats, and the running totals of increases and decreases since
// the last ResetAccumulatedStats.
type Stat struct {
	Current   int64
	Peak      int64
	Allocated int64
	Freed     int64
}

func (s *Stat) increase(n int64) {
	s.Current += n
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
	s.Allocated += n
}

func (s *Stat) decrease(n int64) {
	s.Current -= n
	s.Freed += n
}

// Stat array indexes, PyTorch's StatType order.
const (
	StatAll   = 0 // "all"
	StatSmall = 1 // "small_pool"
	StatLarge = 2 // "large_pool"
)

// StatArray is a statistic kept for all pools together and per pool. The
// pool is the one the block lives in, not the size of the request.
type StatArray [3]Stat

func (a *StatArray) increase(pool int, n int64) {
	a[StatAll].increase(n)
	a[pool].increase(n)
}

func (a *StatArray) decrease(pool int, n int64) {
	a[StatAll].decrease(n)
	a[pool].decrease(n)
}

// Stats mirrors torch.cuda.memory_stats(). See Map for the flattened keys.
type Stats struct {
	Allocation         StatArray // allocated blocks: + at hand-out, - at free request
	Segment            StatArray // cudaMalloc'd segments (expandable mappings do not count)
	Active             StatArray // allocated or pending-free blocks: - at free completion
	InactiveSplit      StatArray // free blocks of split non-expandable segments
	AllocatedBytes     StatArray
	ReservedBytes      StatArray // cudaMalloc'd plus mapped bytes
	ActiveBytes        StatArray
	InactiveSplitBytes StatArray
	RequestedBytes     StatArray // the callers' unrounded sizes of active blocks

	OversizeAllocations Stat // allocated blocks of at least max_split_size
	OversizeSegments    Stat // segments of at least max_split_size

	NumAllocRetries   int64 // mallocs that released the whole cache and retried
	NumOOMs           int64 // OutOfMemoryErrors raised by malloc
	NumSyncAllStreams int64 // waits on all pending events (empty_cache, retries)
	NumDeviceAlloc    int64 // cudaMalloc segments plus expandable map calls
	NumDeviceFree     int64 // cudaFree calls plus expandable unmaps

	// MaxSplitSize is max_split_size as PyTorch reports it: -1 when
	// unlimited, frozen when the allocator is constructed.
	MaxSplitSize int64

	// The stitch policy's own statistics, in Map only when Stitching.
	Stitching     bool
	NumStitches   int64 // stitched ranges made
	NumUnstitches int64 // stitched ranges unmapped
	StitchedBytes Stat  // virtual address space of the live stitched ranges

	// The plan policy's own statistics, in Map only when Planning.
	Planning          bool
	NumPlans          int64 // plans made
	NumPlansAbandoned int64 // plans given up: a request did not match
	NumPlannedAllocs  int64 // requests served at their planned offset
	NumPlanMisses     int64 // planned requests whose bytes were taken, served online
}

var poolNames = [3]string{"all", "small_pool", "large_pool"}
var statFields = [4]string{"current", "peak", "allocated", "freed"}

func (s Stat) values() [4]int64 { return [4]int64{s.Current, s.Peak, s.Allocated, s.Freed} }

// NamedStatArray is one of Stats' per-pool statistics with its PyTorch name.
type NamedStatArray struct {
	Name  string
	Array *StatArray
}

// Arrays lists the per-pool statistics in memory_stats() order, pointing
// into s.
func (s *Stats) Arrays() []NamedStatArray {
	return []NamedStatArray{
		{"allocation", &s.Allocation}, {"segment", &s.Segment}, {"active", &s.Active},
		{"inactive_split", &s.InactiveSplit}, {"allocated_bytes", &s.AllocatedBytes},
		{"reserved_bytes", &s.ReservedBytes}, {"active_bytes", &s.ActiveBytes},
		{"inactive_split_bytes", &s.InactiveSplitBytes}, {"requested_bytes", &s.RequestedBytes},
	}
}

// NamedStat is one of Stats' single statistics with its PyTorch name.
type NamedStat struct {
	Name string
	Stat *Stat
}

// Singles lists the statistics kept without a per-pool breakdown.
func (s *Stats) Singles() []NamedStat {
	return []NamedStat{{"oversize_allocations", &s.OversizeAllocations}, {"oversize_segments", &s.OversizeSegments}}
}

// Map returns the statistics flattened with PyTorch's key names, e.g.
// "reserved_bytes.all.peak", "num_alloc_retries", "max_split_size".
func (s *Stats) Map() map[string]int64 {
	m := make(map[string]int64, 128)
	for _, ar := range s.Arrays() {
		for p, pn := range poolNames {
			v := ar.Array[p].values()
			for f, fn := range statFields {
				m[ar.Name+"."+pn+"."+fn] = v[f]
			}
		}
	}
	for _, st := range s.Singles() {
		v := st.Stat.values()
		for f, fn := range statFields {
			m[st.Name+"."+fn] = v[f]
		}
	}
	m["num_alloc_retries"] = s.NumAllocRetries
	m["num_ooms"] = s.NumOOMs
	m["num_sync_all_streams"] = s.NumSyncAllStreams
	m["num_device_alloc"] = s.NumDeviceAlloc
	m["num_device_free"] = s.NumDeviceFree
	m["max_split_size"] = s.MaxSplitSize
	if s.Stitching {
		v := s.StitchedBytes.values()
		for f, fn := range statFields {
			m["stitched_bytes."+fn] = v[f]
		}
		m["num_stitches"] = s.NumStitches
		m["num_unstitches"] = s.NumUnstitches
	}
	if s.Planning {
		m["num_plans"] = s.NumPlans
		m["num_plans_abandoned"] = s.NumPlansAbandoned
		m["num_planned_allocs"] = s.NumPlannedAllocs
		m["num_plan_misses"] = s.NumPlanMisses
	}
	return m
}

// Keys returns the keys of Map sorted as memory_stats() sorts them.
func (s *Stats) Keys() []string {
	m := s.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String renders the flattened statistics one "key: value" per line.
func (s *Stats) String() string {
	m := s.Map()
	var b strings.Builder
	for _, k := range s.Keys() {
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(strconv.FormatInt(m[k], 10))
		b.WriteByte('\n')
	}
	return b.String()
}

// each calls fn on every statistic.
func (s *Stats) each(fn func(*Stat)) {
	for _, ar := range s.Arrays() {
		for i := range ar.Array {
			fn(&ar.Array[i])
		}
	}
	for _, st := range s.Singles() {
		fn(st.Stat)
	}
	fn(&s.StitchedBytes)
}

func (s *Stats) resetPeak() {
	s.each(func(st *Stat) { st.Peak = st.Current })
}

func (s *Stats) resetAccumulated() {
	s.each(func(st *Stat) { st.Allocated, st.Freed = 0, 0 })
	s.NumAllocRetries, s.NumOOMs, s.NumSyncAllStreams, s.NumDeviceAlloc, s.NumDeviceFree = 0, 0, 0, 0, 0
	s.NumStitches, s.NumUnstitches = 0, 0
	s.NumPlans, s.NumPlansAbandoned, s.NumPlannedAllocs, s.NumPlanMisses = 0, 0, 0, 0
}

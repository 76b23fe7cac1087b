package par

// Sharding splits one search over machines. The unit is the mix: mix m's
// solo runs, its fixed-PAR runs and its packed run depend on (Options, m)
// alone (draw), so shard i of n runs the mixes m with m mod n = i and keeps
// every mix's raw outcomes, not their sums. Merge puts the mixes back in
// order and aggregates them with the code an unsharded Run uses (Run is
// itself one shard of one), so the merged report is the same, byte for
// byte, as the one a single machine prints.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/memreplay/memreplay/sim/workers"
)

// ShardFormat names the layout of a partial result; Merge refuses others.
const ShardFormat = "memreplay-par-shard/1"

// Shard is the partial result of shard Index of Count: the raw outcomes of
// its mixes and what the report needs besides them.
type Shard struct {
	Format string `json:"format"`
	Index  int    `json:"index"`
	Count  int    `json:"count"`
	// Fingerprint identifies every option that shapes the outcomes; parts
	// of different searches do not merge.
	Fingerprint string       `json:"fingerprint"`
	Search      SearchHeader `json:"search"`
	Mixes       []MixRecord  `json:"mix_records"`
	// Name is where the shard was read from, for errors.
	Name string `json:"-"`
}

// SearchHeader is what the report says of the search besides its mixes.
type SearchHeader struct {
	Search
	Settings []string `json:"settings"`
	Packed   bool     `json:"packed"`
}

// MixRecord is one mix's outcomes under every setting, in Options order.
type MixRecord struct {
	Mix      int             `json:"mix"`
	Settings []SettingRecord `json:"settings"`
}

// SettingRecord is one mix under one setting.
type SettingRecord struct {
	Solos  []SoloRecord `json:"solos"` // worker w's counted trial i at w*TrialsPerWorker+i
	Fixed  []MixStats   `json:"fixed"` // PAR 1..MaxPAR
	Packed *MixStats    `json:"packed,omitempty"`
}

// SoloRecord is one trial alone on the empty GPU.
type SoloRecord struct {
	Fits bool   `json:"fits"`
	Peak uint64 `json:"peak_reserved_bytes"`
}

// MixStats is what one run of a mix did (one mix under one setting):
// every figure the rows are made of. It travels in a shard as it is.
type MixStats struct {
	Tasks       int     `json:"trials"` // counted trials (fillers excluded), and their outcomes
	Completed   int     `json:"completed"`
	Pruned      int     `json:"pruned_oom"`
	Failed      int     `json:"failed"`
	OOM         bool    `json:"oom"`           // a trial that fits alone ran out of memory, or a context did not start
	TooBig      int     `json:"too_big_alone"` // counted trials pruned that do not fit even alone
	OOMs        int64   `json:"ooms"`
	Retries     int64   `json:"retries"`
	Rate        float64 `json:"rate_per_s"` // completed trials per second, steady state
	DeviceShare float64 `json:"device_time_share"`
	ResUnalloc  uint64  `json:"reserved_unallocated_max_bytes"` // max reserved-but-unallocated at a counted trial's end
	OOMUnalloc  uint64  `json:"unallocated_at_oom_max_bytes"`   // max reserved-but-unallocated at a counted trial's OOM
	// OOMLabels are the counted trials that fit alone but ran out of
	// memory here: the configurations that cannot share.
	OOMLabels []string `json:"oom_configs,omitempty"`
	// What the report reads of the workers' Summary.
	PeakDeviceUsed uint64 `json:"peak_used_bytes"`
	PeakReserved   uint64 `json:"peak_reserved_bytes"`
	PeakLive       uint64 `json:"peak_live_bytes"`
	Events         int64  `json:"events"`
}

// addTask adds a counted trial's retries, OOMs and unallocated bytes.
func (r *MixStats) addTask(t workers.TaskResult) {
	r.OOMs += t.OOMs
	r.Retries += t.Retries
	r.ResUnalloc = max(r.ResUnalloc, t.ReservedUnallocated)
	r.OOMUnalloc = max(r.OOMUnalloc, t.UnallocatedAtOOM)
}

// setSummary keeps what the report reads of the workers' summary.
func (r *MixStats) setSummary(sum workers.Summary) {
	r.PeakDeviceUsed, r.PeakReserved, r.PeakLive, r.Events = sum.PeakDeviceUsed, sum.PeakReserved, sum.PeakLive, sum.Events
}

func header(o *Options) SearchHeader {
	h := SearchHeader{Search: Search{
		Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, Source: o.Source,
		MaxPAR: o.MaxPAR, Mixes: o.Mixes, TrialsPerWorker: o.TrialsPerWorker, Seed: o.Seed,
		Confidence: o.Confidence, Share: o.Share, MaxStagger: o.MaxStagger,
	}, Packed: o.Packed}
	for _, s := range o.Settings {
		h.Settings = append(h.Settings, s.Name)
	}
	return h
}

// fingerprint hashes what shapes the outcomes: the header, each setting's
// allocator configuration and policy, the workers' policy, the device
// costs and Options.Workload (the workload's identity beyond its name).
func fingerprint(o *Options) string {
	h := sha256.New()
	b, _ := json.Marshal(header(o))
	h.Write(b)
	for _, s := range o.Settings {
		fmt.Fprintf(h, "\x00%+v\x00%T", s.Config, s.Policy)
	}
	fmt.Fprintf(h, "\x00%+v\x00%+v\x00%s", o.Policy, o.Costs, o.Workload)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ParseShard reads "i/n" (i in 0..n-1, as Kubernetes' JOB_COMPLETION_INDEX
// and a Slurm array from 0 count).
func ParseShard(s string) (index, count int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		_, err = fmt.Sscanf(a+" "+b, "%d %d", &index, &count)
	}
	if !ok || err != nil || fmt.Sprintf("%d/%d", index, count) != s {
		return 0, 0, fmt.Errorf("%q: want i/n, e.g. 0/4", s)
	}
	if count < 1 || index < 0 || index >= count {
		return 0, 0, fmt.Errorf("%q: want 0 <= i < n", s)
	}
	return index, count, nil
}

// MaxShardBytes bounds a part file. A mix takes about 14 KB of a part at
// PAR up to 8 under two settings (20 mixes: 275 KB), so a part of 1 GiB
// holds some 78,000 mixes; a larger search is split into more shards.
const MaxShardBytes = 1 << 30

// maxShardBytes is MaxShardBytes, smaller in tests.
var maxShardBytes int64 = MaxShardBytes

// ReadShard reads a partial result written by memreplay par --shard. The
// file is decoded as it is read, so one that is not JSON (/dev/zero) is
// refused at its first bytes; one larger than MaxShardBytes is refused
// once that much was read, not read into memory whole.
func ReadShard(path string) (*Shard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lr := &io.LimitedReader{R: f, N: maxShardBytes + 1}
	dec := json.NewDecoder(lr)
	var s Shard
	err = dec.Decode(&s)
	if err == nil {
		if _, end := dec.Token(); end != io.EOF {
			err = fmt.Errorf("more data after the part's JSON object")
		}
	}
	if err != nil {
		if lr.N == 0 {
			return nil, fmt.Errorf("%s: larger than %d bytes: not a par shard (split the search into more shards)", path, maxShardBytes)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%s: byte offset %d: not a par shard: %v", path, se.Offset, err)
		}
		return nil, fmt.Errorf("%s: not a par shard: %v", path, err)
	}
	if s.Format != ShardFormat {
		return nil, fmt.Errorf("%s: not a par shard (format %q, want %q)", path, s.Format, ShardFormat)
	}
	h := &s.Search
	switch {
	case s.Count < 1 || s.Count > maxShards || s.Index < 0 || s.Index >= s.Count:
		return nil, fmt.Errorf("%s: shard %d/%d: want 0 <= i < n <= %d", path, s.Index, s.Count, maxShards)
	case h.Mixes < 1 || h.Mixes > MaxMixes || h.MaxPAR < 1 || h.MaxPAR > 64 || h.TrialsPerWorker < 1 || h.TrialsPerWorker > MaxTrialsPerWorker:
		return nil, fmt.Errorf("%s: a search of %d mixes, PAR up to %d, %d trials per worker: not one par runs", path, h.Mixes, h.MaxPAR, h.TrialsPerWorker)
	case !(h.Confidence > 0 && h.Confidence < 1) || len(h.Settings) == 0:
		return nil, fmt.Errorf("%s: confidence %v with %d settings: not one par runs", path, h.Confidence, len(h.Settings))
	}
	s.Name = path
	return &s, nil
}

// maxShards bounds a part's count and mixes, so that a damaged file cannot
// make the merge allocate without end.
const maxShards = 1 << 24

// MaxMixes and MaxTrialsPerWorker bound a search's --mixes and
// --trials-per-worker as a part file's are bounded: the run allocates
// per mix and per trial before it starts (--mixes 10^12 died out of
// memory at once), and a search beyond them could not be merged.
const (
	MaxMixes           = maxShards
	MaxTrialsPerWorker = 1 << 16
)

// Merge combines the shards of one search into its report: the report one
// unsharded Run with the same options gives. It refuses shards of other
// searches, a shard given twice, a missing one, and a shard whose mixes
// are not the ones its index owns, naming the file.
func Merge(parts []*Shard) (*Report, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("par: no shard to merge")
	}
	first := parts[0]
	byIndex := make([]*Shard, first.Count)
	for _, p := range parts {
		switch {
		case p.Fingerprint != first.Fingerprint:
			return nil, fmt.Errorf("%s: a shard of another search than %s (other options: fingerprint %s, not %s)", p.Name, first.Name, p.Fingerprint, first.Fingerprint)
		case p.Count != first.Count:
			return nil, fmt.Errorf("%s: shard %d/%d, but %s is one of %d", p.Name, p.Index, p.Count, first.Name, first.Count)
		case p.Index < 0 || p.Index >= p.Count:
			return nil, fmt.Errorf("%s: shard index %d outside 0..%d", p.Name, p.Index, p.Count-1)
		case byIndex[p.Index] != nil:
			return nil, fmt.Errorf("%s: shard %d/%d given twice (also %s)", p.Name, p.Index, p.Count, byIndex[p.Index].Name)
		}
		byIndex[p.Index] = p
	}
	for i, p := range byIndex {
		if p == nil {
			return nil, fmt.Errorf("shard %d/%d is missing (merging %d of %d parts, from %s)", i, first.Count, len(parts), first.Count, first.Name)
		}
	}
	h := first.Search
	records := make([]*MixRecord, h.Mixes)
	for _, p := range byIndex {
		for j := range p.Mixes {
			r := &p.Mixes[j]
			if r.Mix < 0 || r.Mix >= h.Mixes || r.Mix%p.Count != p.Index || records[r.Mix] != nil {
				return nil, fmt.Errorf("%s: mix %d does not belong to shard %d/%d or is there twice", p.Name, r.Mix, p.Index, p.Count)
			}
			if err := r.check(&h); err != nil {
				return nil, fmt.Errorf("%s: mix %d: %v", p.Name, r.Mix, err)
			}
			records[r.Mix] = r
		}
	}
	for m, r := range records {
		if r == nil {
			return nil, fmt.Errorf("%s: mix %d is missing", byIndex[m%first.Count].Name, m)
		}
	}
	return assemble(h, records), nil
}

// check says whether r has the shape h promises, so that assemble cannot
// index out of range on a damaged file.
func (r *MixRecord) check(h *SearchHeader) error {
	if len(r.Settings) != len(h.Settings) {
		return fmt.Errorf("%d settings, want %d", len(r.Settings), len(h.Settings))
	}
	for _, s := range r.Settings {
		switch {
		case len(s.Solos) != h.MaxPAR*h.TrialsPerWorker:
			return fmt.Errorf("%d solo runs, want %d", len(s.Solos), h.MaxPAR*h.TrialsPerWorker)
		case len(s.Fixed) != h.MaxPAR:
			return fmt.Errorf("%d PARs, want %d", len(s.Fixed), h.MaxPAR)
		case (s.Packed != nil) != h.Packed:
			return fmt.Errorf("packed run present: %v, want %v", s.Packed != nil, h.Packed)
		}
	}
	return nil
}

// assemble aggregates the mixes, all of them, in order, into the report.
func assemble(h SearchHeader, records []*MixRecord) *Report {
	o := &Options{
		Capacity: h.Capacity, ContextOverhead: h.ContextOverhead, MaxPAR: h.MaxPAR, Mixes: h.Mixes,
		TrialsPerWorker: h.TrialsPerWorker, Confidence: h.Confidence,
	}
	K, M := h.MaxPAR, h.Mixes
	rep := &Report{Search: h.Search, MixesNeeded: mixesNeeded(h.Confidence)}
	for s, name := range h.Settings {
		rs := make([]MixStats, K*M) // PAR k's mix m at (k-1)*M+m
		var pk []MixStats
		var solos []solo
		for m, r := range records {
			sr := &r.Settings[s]
			for k := range K {
				rs[k*M+m] = sr.Fixed[k]
			}
			if sr.Packed != nil {
				pk = append(pk, *sr.Packed)
			}
			for _, x := range sr.Solos {
				solos = append(solos, solo{fits: x.Fits, peak: x.Peak})
			}
		}
		rep.Results = append(rep.Results, aggregate(o, Setting{Name: name}, rs, pk, solos))
		for _, r := range rs {
			rep.Events += r.Events
		}
		for _, r := range pk {
			rep.Events += r.Events
		}
	}
	return rep
}

// shardMixes are the mixes shard index of count runs.
func shardMixes(M, index, count int) []int {
	var ms []int
	for m := index; m < M; m += count {
		ms = append(ms, m)
	}
	return slices.Clip(ms)
}

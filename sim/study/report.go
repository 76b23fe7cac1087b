package study

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is what a study did, computed from its state file alone (so a
// resumed study's report covers every run): the outcomes, the allocator's
// retries and OOMs, the workers' restarts, throughput on the simulated
// clock, and how fragmentation and "reserved but unallocated" moved as the
// study went on.
type Report struct {
	Label     string `json:"label"` // the policy set, e.g. "PAR 4, expandable_segments:True, prune-on-oom, empty-cache"
	Space     string `json:"space"`
	Sampler   string `json:"sampler"`
	Seed      uint64 `json:"seed"`
	Workers   int    `json:"par"`
	AllocConf string `json:"alloc_conf"`
	Capacity  uint64 `json:"capacity"`

	Planned        int `json:"planned"`
	Finished       int `json:"finished"`
	Completed      int `json:"completed"`
	PrunedOOM      int `json:"pruned_oom"`
	PrunedEstimate int `json:"pruned_estimate"`
	Failed         int `json:"failed"`
	NotRun         int `json:"not_run"` // the study stopped (first OOM, workers given up) before these ran

	OOMs     int64 `json:"ooms"`
	Retries  int64 `json:"retries"`
	Restarts int   `json:"restarts"` // fresh processes after each worker's first in each run (resets and restarts)
	GivenUp  int   `json:"given_up"` // workers given up after max-failures in a row, over all runs
	Stopped  bool  `json:"stopped"`  // the last run stopped at its first OOM (prune-on-oom off)
	Runs     int   `json:"runs"`     // 1 + resumes

	// Makespan is the study's simulated wall time, all runs together.
	Makespan time.Duration `json:"makespan_ns"`
	// CompletedPerHour is completed trials per simulated hour: the figure
	// the BERT-family study tracked ("~226 trials/day with crashes").
	CompletedPerHour float64 `json:"completed_per_hour"`
	PeakDeviceUsed   uint64  `json:"peak_device_used"`
	// MeanWaste is the mean over trials that ran of 1 - peak allocated /
	// peak reserved (their worker's allocator during the trial).
	MeanWaste float64 `json:"mean_waste"`
	// MaxReservedUnallocated is the largest "reserved but unallocated"
	// left right after a trial's end (before the between-trial policy).
	MaxReservedUnallocated uint64 `json:"max_reserved_unallocated"`
	// FirstOOM is the first trial pruned by an OOM (in finish order), and
	// FirstFailure the first failed one: the messages to act on.
	FirstOOM     string `json:"first_oom,omitempty"`
	FirstFailure string `json:"first_failure,omitempty"`

	// Buckets are the finished trials in finish order, cut in tenths.
	Buckets []Bucket `json:"buckets"`
}

// Bucket is a slice of the study in finish order: trials From..To (1-based
// ordinals of finishing, not ids).
type Bucket struct {
	From           int     `json:"from"`
	To             int     `json:"to"`
	Completed      int     `json:"completed"`
	PrunedOOM      int     `json:"pruned_oom"`
	PrunedEstimate int     `json:"pruned_estimate"`
	Failed         int     `json:"failed"`
	Retries        int64   `json:"retries"`
	MeanWaste      float64 `json:"mean_waste"`
	// MeanReservedUnallocated and MaxReservedUnallocated: bytes cached but
	// not allocated right after each trial's end.
	MeanReservedUnallocated uint64 `json:"mean_reserved_unallocated"`
	MaxReservedUnallocated  uint64 `json:"max_reserved_unallocated"`
}

// PolicyLabel names a policy set in a few words.
func PolicyLabel(o OptionsJSON) string {
	var p []string
	if o.Schedule == PackedSchedule {
		p = append(p, fmt.Sprintf("packed (%s prediction, at most %d at once)", o.Predict, o.Workers))
	} else {
		p = append(p, fmt.Sprintf("PAR %d", o.Workers))
	}
	if o.AllocConf == "" {
		p = append(p, "default allocator")
	} else {
		p = append(p, o.AllocConf)
	}
	if o.AllocPolicy != "" && o.AllocPolicy != "pytorch" {
		p = append(p, "policy "+o.AllocPolicy)
	}
	if o.PruneOnOOM {
		p = append(p, "prune-on-oom")
	} else {
		p = append(p, "stop-on-oom")
	}
	switch {
	case o.DoubleClear:
		p = append(p, "double-clear")
	case o.EmptyCache:
		p = append(p, "empty-cache")
	}
	if o.ResetEvery > 0 {
		if o.ResetKind == ResetClear {
			p = append(p, fmt.Sprintf("reset-every %d (clear, same process)", o.ResetEvery))
		} else {
			p = append(p, fmt.Sprintf("reset-every %d", o.ResetEvery))
		}
	}
	if o.EstimatePrune {
		p = append(p, "estimate-prune")
	}
	if o.RestartOnError {
		mf := o.MaxFailures
		if mf == 0 {
			mf = 3
		}
		p = append(p, fmt.Sprintf("restart-on-error (give up after %d)", mf))
	}
	if o.OOMCorrupts > 0 {
		p = append(p, fmt.Sprintf("oom-corrupts %g", o.OOMCorrupts))
	}
	if o.FaultRate > 0 {
		p = append(p, fmt.Sprintf("fault-rate %g", o.FaultRate))
	}
	return strings.Join(p, ", ")
}

// Summarize computes the report of a state. planned is the study's trial
// count (Result.Planned; 0: the last resume's, else the header's).
func Summarize(st *State, planned int) Report {
	h := st.Header.Options
	if planned == 0 {
		planned = h.Trials
		// A resume may have extended the study; the last one says.
		for _, r := range st.Resumes {
			if r.Trials > 0 {
				planned = r.Trials
			}
		}
	}
	r := Report{Label: PolicyLabel(h), Space: h.Space.Name, Sampler: h.Sampler, Seed: h.Seed, Workers: h.Workers,
		AllocConf: h.AllocConf, Capacity: h.Capacity, Planned: planned, Runs: st.Runs()}
	recs := slices.Clone(st.Records)
	slices.SortStableFunc(recs, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.EndUS, b.EndUS), cmp.Compare(a.ID, b.ID))
	})
	var wasteSum float64
	var ran int
	for _, rec := range recs {
		r.Finished++
		switch rec.Outcome {
		case Completed:
			r.Completed++
		case PrunedOOM:
			r.PrunedOOM++
			if r.FirstOOM == "" {
				r.FirstOOM = fmt.Sprintf("trial %d (%s): %s", rec.ID, rec.Label, firstLine(rec.Error))
			}
		case PrunedEstimate:
			r.PrunedEstimate++
		case Failed:
			r.Failed++
			if r.FirstFailure == "" {
				r.FirstFailure = fmt.Sprintf("trial %d (%s): %s", rec.ID, rec.Label, firstLine(rec.Error))
			}
		}
		r.OOMs += rec.OOMs
		r.Retries += rec.Retries
		if w, ok := waste(rec); ok {
			wasteSum += w
			ran++
		}
		r.MaxReservedUnallocated = max(r.MaxReservedUnallocated, rec.ReservedUnallocated)
	}
	if ran > 0 {
		r.MeanWaste = wasteSum / float64(ran)
	}
	r.NotRun = max(0, planned-r.Finished)
	// Restarts are counted from the trials' process numbers, not from the
	// run_end lines, so that a killed run's restarts count too: every
	// fresh process after a worker's first takes a trial (the engine starts
	// one only for a trial), so the highest process number a worker's
	// trials saw in a run is 1 + its restarts there.
	type wr struct{ run, worker int }
	procs := map[wr]int{}
	for _, rec := range recs {
		if rec.Worker >= 0 {
			k := wr{rec.Run, rec.Worker}
			procs[k] = max(procs[k], rec.Process)
		}
	}
	for _, p := range procs {
		r.Restarts += max(0, p-1)
	}
	for i, e := range st.Ends {
		r.GivenUp += len(e.GivenUp)
		r.PeakDeviceUsed = max(r.PeakDeviceUsed, e.PeakDeviceUsed)
		if i == len(st.Ends)-1 {
			r.Stopped = e.Stopped
		}
	}
	r.Makespan = time.Duration(st.ClockUS()) * time.Microsecond
	if r.Makespan > 0 {
		r.CompletedPerHour = float64(r.Completed) / r.Makespan.Hours()
	}
	r.Buckets = buckets(recs)
	return r
}

// waste is 1 - peak allocated / peak reserved of a trial that ran.
func waste(rec Record) (float64, bool) {
	if rec.PeakReserved == 0 {
		return 0, false
	}
	return 1 - float64(rec.PeakAllocated)/float64(rec.PeakReserved), true
}

// buckets cuts the finished trials (in finish order) in ten equal slices,
// or one per trial when there are fewer than ten.
func buckets(recs []Record) []Bucket {
	n := len(recs)
	k := min(10, n)
	var out []Bucket
	for i := range k {
		lo, hi := i*n/k, (i+1)*n/k
		b := Bucket{From: lo + 1, To: hi}
		var ws float64
		var ran int
		var ru uint64
		for _, rec := range recs[lo:hi] {
			switch rec.Outcome {
			case Completed:
				b.Completed++
			case PrunedOOM:
				b.PrunedOOM++
			case PrunedEstimate:
				b.PrunedEstimate++
			case Failed:
				b.Failed++
			}
			b.Retries += rec.Retries
			if w, ok := waste(rec); ok {
				ws += w
				ran++
				ru += rec.ReservedUnallocated
			}
			b.MaxReservedUnallocated = max(b.MaxReservedUnallocated, rec.ReservedUnallocated)
		}
		if ran > 0 {
			b.MeanWaste = ws / float64(ran)
			b.MeanReservedUnallocated = ru / uint64(ran)
		}
		out = append(out, b)
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

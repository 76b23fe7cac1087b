package par

import "time"

// Search is what a PAR search was asked, as both its report and each
// shard's header (SearchHeader) say it; embedded in both, so the JSON keys
// stay where they were and neither is copied from the other field by field.
type Search struct {
	Capacity        uint64        `json:"capacity_bytes"`
	ContextOverhead uint64        `json:"context_overhead_bytes"`
	Source          string        `json:"source"`
	MaxPAR          int           `json:"max_par"`
	Mixes           int           `json:"mixes"`
	TrialsPerWorker int           `json:"trials_per_worker"`
	Seed            uint64        `json:"seed"`
	Confidence      float64       `json:"confidence"`
	Share           float64       `json:"trial_share"`
	MaxStagger      time.Duration `json:"max_stagger_ns"` // 0: the mean duration of each worker's trials
}

// Report is a PAR search's answer.
type Report struct {
	Search
	// MixesNeeded is the fewest mixes with which any PAR can be called safe
	// at this confidence (no OOM at all in them).
	MixesNeeded int       `json:"mixes_needed"`
	Settings    []Setting `json:"-"`
	Results     []Result  `json:"settings"`
	// Events is how many events the whole search applied.
	Events int64 `json:"events"`
}

// Result is one allocator setting's rows and verdict.
type Result struct {
	Setting string `json:"alloc_conf"`
	Rows    []Row  `json:"rows"` // PAR 1..MaxPAR
	// Packed is the packed schedule's row (PAR 0), when it ran: the same
	// mixes' trials admitted by their predicted memory, at most MaxPAR at
	// once; its Speedup is over PAR 1.
	Packed *Row `json:"packed,omitempty"`
	// OOMConfigs are the configurations (trial labels) that ran out of
	// memory while sharing the GPU, over all PARs, most often first: the
	// trials that fit alone but not beside others.
	OOMConfigs []ConfigCount `json:"oom_configs"`
	// SafePAR is the largest PAR with no OOM at the confidence (package
	// comment); 0 when not even PAR 1 qualifies.
	SafePAR int `json:"safe_par"`
	// NoOOMPAR is the largest k such that no mix at any PAR up to k had an
	// OOM: what the mixes saw, without the confidence.
	NoOOMPAR int `json:"no_oom_par"`
	// BestPAR is the PAR up to SafePAR with the highest throughput; 0
	// when SafePAR is 0.
	BestPAR int `json:"best_par"`
	// SoloTrials is how many trials ran alone (every counted trial of every
	// mix) and SoloTooBig how many of them did not fit.
	SoloTrials int `json:"solo_trials"`
	SoloTooBig int `json:"solo_too_big"`
	// SoloPeakReservedMedian and Max are the peak reserved bytes of one
	// trial alone in a fresh process, over the trials that fit, and
	// NaiveMedian and NaiveMax the hand estimate
	// floor(0.9 x capacity / (peak + context)) with them.
	SoloPeakReservedMedian uint64 `json:"solo_peak_reserved_median_bytes"`
	SoloPeakReservedMax    uint64 `json:"solo_peak_reserved_max_bytes"`
	NaiveMedian            int    `json:"naive_par_median"`
	NaiveMax               int    `json:"naive_par_max"`
}

// Row is one PAR's figures over its mixes.
type Row struct {
	PAR          int     `json:"par"`
	Mixes        int     `json:"mixes"`
	MixesWithOOM int     `json:"mixes_with_oom"`
	POOM         float64 `json:"p_oom"`       // MixesWithOOM / Mixes
	POOMUpper    float64 `json:"p_oom_upper"` // one-sided Wilson bound at the confidence
	Trials       int     `json:"trials"`
	Completed    int     `json:"completed"`
	PrunedOOM    int     `json:"pruned_oom"`
	// TooBig counts the pruned trials that do not fit even alone on the GPU
	// (they are pruned at every PAR, so P(OOM) leaves them out).
	TooBig  int   `json:"too_big_alone"`
	Failed  int   `json:"failed"` // contexts that could not start
	OOMs    int64 `json:"ooms"`   // OutOfMemoryErrors raised (num_ooms)
	Retries int64 `json:"retries"`
	// PeakUsedMax and PeakUsedMedian are the GPU's peak used bytes over the
	// mixes (all workers' reserved memory and contexts): the "97%" of the
	// BERT-family study's reports. HeadroomMin is capacity - PeakUsedMax.
	PeakUsedMax    uint64 `json:"peak_used_max_bytes"`
	PeakUsedMedian uint64 `json:"peak_used_median_bytes"`
	HeadroomMin    uint64 `json:"headroom_min_bytes"`
	// Waste is 1 - peak live / peak reserved (all workers together, contexts
	// excluded), the mean over the mixes.
	Waste float64 `json:"waste"`
	// ReservedUnallocatedMax is the largest "reserved but unallocated" a
	// worker's cache held at a trial's end.
	ReservedUnallocatedMax uint64  `json:"reserved_unallocated_max_bytes"`
	TrialsPerHour          float64 `json:"trials_per_hour"`
	Speedup                float64 `json:"speedup"` // over PAR 1
	// DeviceTimeShare is the fraction of the workers' time spent in device
	// calls.
	DeviceTimeShare float64 `json:"device_time_share"`
	// UnallocatedAtOOMMax is the largest "reserved by PyTorch but
	// unallocated" of an OOM message: what the cache held unused at the
	// moment a trial ran out of memory (0 without OOM).
	UnallocatedAtOOMMax uint64 `json:"unallocated_at_oom_max_bytes"`
}

// MaxOOMConfigs is how many configurations Result.OOMConfigs lists.
const MaxOOMConfigs = 10

// ConfigCount is one configuration and how often it ran out of memory
// beside others.
type ConfigCount struct {
	Label string `json:"config"`
	OOMs  int    `json:"ooms"`
}

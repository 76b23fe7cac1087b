package par

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/workers"
)

// mix is one draw: the trials each of k workers runs, in order, and the
// workers' start offsets. A worker's first TrialsPerWorker trials are the
// counted ones; the rest are fillers (see runMix).
type mix struct {
	trials  [][]Trial
	stagger []time.Duration
}

// draw makes mix m of PAR k. Worker w's trials and start offset come from
// (Seed, m, w) alone: not from the setting, so that every setting sees the
// same mixes, and not from k, so that PAR k+1's mix m is PAR k's plus one
// worker. Rows then differ by what k and the settings do, not by the dice
// (common random numbers), and throughput ratios between PARs compare the
// same trials.
func draw(o *Options, k, m int) mix {
	mx := mix{trials: make([][]Trial, k), stagger: make([]time.Duration, k)}
	for w := range mx.trials {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(m)<<32|uint64(w)))
		var total time.Duration
		for i := 0; i < 2*o.TrialsPerWorker; i++ {
			t := o.Sample(rng)
			if i < o.TrialsPerWorker {
				total += t.Duration
			}
			mx.trials[w] = append(mx.trials[w], t)
		}
		maxStagger := o.MaxStagger
		if maxStagger == 0 {
			maxStagger = total / time.Duration(o.TrialsPerWorker)
		}
		if w > 0 && maxStagger > 0 {
			mx.stagger[w] = time.Duration(rng.Int64N(int64(maxStagger)))
		}
	}
	return mx
}

// runMix runs mx under setting s.
//
// Each worker runs its TrialsPerWorker counted trials; a worker done with
// them while another is still in its own goes on with filler trials (the
// next draws of its stream), so that all k workers stay busy until the last
// counted trial ends, as in a long study where workers never run out of
// trials. Fillers load the GPU like any trial but are left out of the OOM
// and per-trial figures, so every mix of PAR k counts k x TrialsPerWorker
// trials.
//
// Throughput is measured in the window (T0, T1] in which all k workers are
// at work with warm caches: T0 is when the last worker ends its first trial
// (when it starts it, with one trial per worker), T1 when the last counted
// trial ends. Each completed trial (counted or filler) counts for the
// fraction of its run time that fell in the window, and the sum over the
// window's length is the steady-state rate of a long study: neither the
// staggered start (worker 0 alone for a while), nor the first trial's cold
// cache (every segment a device call), nor a ragged end (fewer workers
// sharing the GPU) counts for or against a PAR.
func runMix(o *Options, s *Setting, mx mix, fits func(w, i int) bool) (MixStats, error) {
	k, T := len(mx.trials), o.TrialsPerWorker
	pos := make([]int, k)
	countedLeft := k * T // counted trials not yet ended
	var res MixStats
	var t0, t1, warm time.Duration
	type span struct{ start, end time.Duration }
	var completions []span // fillers included
	var device, busy time.Duration
	pol := o.Policy
	pol.OnOOM = workers.PruneOnOOM
	pol.RestartOnStickyError = true
	cfg := s.Config
	sum, err := workers.Run(workers.Options{
		GPU:         gpu.Options{Name: "par", Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, Costs: o.Costs},
		Alloc:       &cfg,
		AllocPolicy: s.Policy,
		Workers:     k,
		Stagger:     mx.stagger,
		Policy:      pol,
		Compute:     workers.Compute{Share: o.Share},
		Next: func(w int, now time.Duration) (workers.Task, bool) {
			i := pos[w]
			if i >= len(mx.trials[w]) || (i >= T && countedLeft == 0) {
				return workers.Task{}, false
			}
			if i == 0 {
				t0 = max(t0, now)
			}
			pos[w]++
			t := mx.trials[w][i]
			// IDs: counted trials first (1..k*T), then fillers.
			id := w*T + i + 1
			if i >= T {
				id = k*T + w*T + (i - T) + 1
			}
			return workers.Task{ID: id, Label: t.Label, Open: t.Open}, true
		},
		Done: func(r workers.TaskResult) error {
			if r.Outcome == workers.Completed {
				completions = append(completions, span{r.Start, r.End})
			}
			device += r.DeviceTime
			busy += r.End - r.Start
			if r.Task.ID > k*T {
				return nil // a filler
			}
			countedLeft--
			t1 = max(t1, r.End)
			if (r.Task.ID-1)%T == 0 {
				warm = max(warm, r.End) // a worker's first trial ended
			}
			res.Tasks++
			w, i := (r.Task.ID-1)/T, (r.Task.ID-1)%T
			switch r.Outcome {
			case workers.Completed:
				res.Completed++
			case workers.PrunedOOM:
				res.Pruned++
				if fits(w, i) {
					res.OOM = true
					res.OOMLabels = append(res.OOMLabels, r.Task.Label)
				} else {
					res.TooBig++ // pruned at any PAR: not sharing's doing
				}
			default:
				// A context that could not start (no faults are
				// injected here): out of memory too.
				res.Failed++
				res.OOM = true
			}
			res.addTask(r)
			return nil
		},
	})
	if err != nil {
		return res, err
	}
	res.setSummary(sum)
	if T > 1 {
		t0 = warm
	}
	if t1 > t0 {
		n := 0.0
		for _, c := range completions {
			if in := min(c.end, t1) - max(c.start, t0); in > 0 {
				n += float64(in) / float64(c.end-c.start)
			}
		}
		res.Rate = n / (t1 - t0).Seconds()
	}
	if busy > 0 {
		res.DeviceShare = float64(device) / float64(busy)
	}
	return res, nil
}

// solo is one trial run alone, in a fresh process on an empty GPU.
type solo struct {
	fits bool   // it completed
	peak uint64 // its peak reserved bytes
}

func runSolo(o *Options, s *Setting, t Trial) (solo, error) {
	var out solo
	given := false
	cfg := s.Config
	_, err := workers.Run(workers.Options{
		GPU:         gpu.Options{Name: "par", Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, Costs: o.Costs},
		Alloc:       &cfg,
		AllocPolicy: s.Policy,
		Workers:     1,
		Next: func(int, time.Duration) (workers.Task, bool) {
			if given {
				return workers.Task{}, false
			}
			given = true
			return workers.Task{ID: 1, Label: t.Label, Open: t.Open}, true
		},
		Done: func(r workers.TaskResult) error {
			out = solo{fits: r.Outcome == workers.Completed, peak: r.PeakReserved}
			return nil
		},
	})
	return out, err
}

// Run runs the search and returns its report. Errors are bad options and
// workload failures (a trace that cannot be read), named by the trial.
//
// First every counted trial of every mix runs alone (per setting): whether
// it fits at all, and its peak for the naive estimate. A trial that does
// not fit alone is pruned at any PAR; its OOM says nothing about sharing the
// GPU, so it counts apart (Row.TooBig) and not towards P(OOM). Then the
// mixes run. Run is the one shard of one, merged (shard.go).
func Run(o Options) (*Report, error) {
	sh, err := RunShard(o, 0, 1)
	if err != nil {
		return nil, err
	}
	rep, err := Merge([]*Shard{sh})
	if err != nil {
		return nil, err
	}
	rep.Settings = o.Settings
	return rep, nil
}

// RunShard runs the mixes m of the search with m mod count = index and
// returns their raw outcomes, for Merge.
func RunShard(o Options, index, count int) (*Shard, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if count < 1 || index < 0 || index >= count {
		return nil, fmt.Errorf("par: shard %d/%d: want 0 <= index < count", index, count)
	}
	K, T, S := o.MaxPAR, o.TrialsPerWorker, len(o.Settings)
	ms := shardMixes(o.Mixes, index, count)
	M := len(ms)
	// PAR k's mix is the first k workers of the K-worker draw. full[x] is
	// mix ms[x]: what a mix does depends on its index alone.
	full := make([]mix, M)
	for x, m := range ms {
		full[x] = draw(&o, K, m)
	}
	sub := func(x, k int) mix { return mix{trials: full[x].trials[:k], stagger: full[x].stagger[:k]} }

	// Solo runs: job j is setting j/(M*K*T), trial (x, w, i) = j%(M*K*T).
	per := M * K * T
	solos := make([]solo, S*per)
	soloIdx := func(x, w, i int) int { return (x*K+w)*T + i }
	// Mix runs: job j is setting j/(K*M), PAR j%(K*M)/M+1, mix j%M.
	results := make([]MixStats, S*K*M)
	total := len(solos) + len(results)
	if o.Packed {
		total += S * M
	}
	progress := newCounter(o.Progress, total)
	err := parallel(o.Parallel, len(solos), func(j int) error {
		s, r := j/per, j%per
		x, w, i := r/(K*T), r%(K*T)/T, r%T
		var err error
		solos[j], err = runSolo(&o, &o.Settings[s], full[x].trials[w][i])
		progress.add()
		return err
	})
	if err != nil {
		return nil, err
	}
	err = parallel(o.Parallel, len(results), func(j int) error {
		s, r := j/(K*M), j%(K*M)
		k, x := r/M+1, r%M
		fits := func(w, i int) bool { return solos[s*per+soloIdx(x, w, i)].fits }
		var err error
		results[j], err = runMix(&o, &o.Settings[s], sub(x, k), fits)
		progress.add()
		return err
	})
	if err != nil {
		return nil, err
	}
	// Packed runs: job j is setting j/M, mix j%M, all K workers' trials.
	var packed []MixStats
	if o.Packed {
		packed = make([]MixStats, S*M)
		err = parallel(o.Parallel, len(packed), func(j int) error {
			s, x := j/M, j%M
			sl := func(w, i int) solo { return solos[s*per+soloIdx(x, w, i)] }
			var err error
			packed[j], err = runPacked(&o, &o.Settings[s], full[x], sl)
			progress.add()
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sh := &Shard{
		Format: ShardFormat, Index: index, Count: count,
		Fingerprint: fingerprint(&o), Search: header(&o),
	}
	for x, m := range ms {
		rec := MixRecord{Mix: m}
		for s := range S {
			var sr SettingRecord
			for k := 1; k <= K; k++ {
				sr.Fixed = append(sr.Fixed, results[s*K*M+(k-1)*M+x])
			}
			if o.Packed {
				st := packed[s*M+x]
				sr.Packed = &st
			}
			for _, sl := range solos[s*per+soloIdx(x, 0, 0) : s*per+soloIdx(x+1, 0, 0)] {
				sr.Solos = append(sr.Solos, SoloRecord{Fits: sl.fits, Peak: sl.peak})
			}
			rec.Settings = append(rec.Settings, sr)
		}
		sh.Mixes = append(sh.Mixes, rec)
	}
	return sh, nil
}

// parallel runs fn(0..n-1) on up to par goroutines (0: one per CPU) and
// returns the error of the lowest j that failed, the same error whatever the
// scheduling.
func parallel(par, n int, fn func(j int) error) error {
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	errs := make([]error, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for g := 0; g < min(par, n); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				errs[j] = fn(j)
			}
		}()
	}
	for j := 0; j < n; j++ {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// counter reports progress from several goroutines, one call at a time.
type counter struct {
	mu    sync.Mutex
	fn    func(done, total int)
	done  int
	total int
}

func newCounter(fn func(done, total int), total int) *counter {
	return &counter{fn: fn, total: total}
}

func (c *counter) add() {
	if c.fn == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.fn(c.done, c.total)
}

// makeRow sums one PAR's mixes (k 0: the packed schedule's).
func makeRow(o *Options, k int, ms []MixStats) Row {
	M := len(ms)
	row := Row{PAR: k, Mixes: M}
	var used []uint64
	var rate, waste, share float64
	for _, r := range ms {
		if r.OOM {
			row.MixesWithOOM++
		}
		row.TooBig += r.TooBig
		row.Trials += r.Tasks
		row.Completed += r.Completed
		row.PrunedOOM += r.Pruned
		row.Failed += r.Failed
		row.OOMs += r.OOMs
		row.Retries += r.Retries
		used = append(used, r.PeakDeviceUsed)
		if r.PeakReserved > 0 {
			waste += 1 - float64(r.PeakLive)/float64(r.PeakReserved)
		}
		row.ReservedUnallocatedMax = max(row.ReservedUnallocatedMax, r.ResUnalloc)
		row.UnallocatedAtOOMMax = max(row.UnallocatedAtOOMMax, r.OOMUnalloc)
		rate += r.Rate
		share += r.DeviceShare
	}
	row.POOM = float64(row.MixesWithOOM) / float64(M)
	row.POOMUpper = wilsonUpper(row.MixesWithOOM, M, o.Confidence)
	row.PeakUsedMax = slices.Max(used)
	row.PeakUsedMedian = median(used)
	row.HeadroomMin = o.Capacity - min(o.Capacity, row.PeakUsedMax)
	row.Waste = waste / float64(M)
	row.TrialsPerHour = rate / float64(M) * 3600
	row.DeviceTimeShare = share / float64(M)
	return row
}

// aggregate turns one setting's mixes into its rows and verdicts; packed,
// when the search ran it, are the packed schedule's runs of the same mixes.
func aggregate(o *Options, s Setting, rs, packed []MixStats, solos []solo) Result {
	K, M := o.MaxPAR, o.Mixes
	out := Result{Setting: s.Name}
	for k := 1; k <= K; k++ {
		row := makeRow(o, k, rs[(k-1)*M:k*M])
		if k > 1 && out.Rows[0].TrialsPerHour > 0 {
			row.Speedup = row.TrialsPerHour / out.Rows[0].TrialsPerHour
		} else if k == 1 {
			row.Speedup = 1
		}
		out.Rows = append(out.Rows, row)
	}
	out.OOMConfigs = oomConfigs(rs)
	if len(packed) > 0 {
		row := makeRow(o, 0, packed)
		if out.Rows[0].TrialsPerHour > 0 {
			row.Speedup = row.TrialsPerHour / out.Rows[0].TrialsPerHour
		}
		out.Packed = &row
	}
	limit := 1 - o.Confidence
	for _, row := range out.Rows {
		if row.POOMUpper >= limit {
			break
		}
		out.SafePAR = row.PAR
	}
	for _, row := range out.Rows {
		if row.MixesWithOOM > 0 {
			break
		}
		out.NoOOMPAR = row.PAR
	}
	for _, row := range out.Rows[:out.SafePAR] {
		if out.BestPAR == 0 || row.TrialsPerHour > out.Rows[out.BestPAR-1].TrialsPerHour {
			out.BestPAR = row.PAR
		}
	}
	// The naive estimate takes the peaks of the trials that fit alone: the
	// ones a user sees run.
	var solo []uint64
	for _, x := range solos {
		if x.fits {
			solo = append(solo, x.peak)
		} else {
			out.SoloTooBig++
		}
	}
	out.SoloTrials = len(solos)
	if len(solo) > 0 {
		out.SoloPeakReservedMedian = median(solo)
		out.SoloPeakReservedMax = slices.Max(solo)
		out.NaiveMedian = naive(o.Capacity, out.SoloPeakReservedMedian, o.ContextOverhead)
		out.NaiveMax = naive(o.Capacity, out.SoloPeakReservedMax, o.ContextOverhead)
	}
	return out
}

// naive is the hand estimate floor(0.9 x capacity / (peak + context)).
func naive(capacity, peak, ctx uint64) int {
	return int(math.Floor(NaiveFraction * float64(capacity) / float64(peak+ctx)))
}

// median is the lower median: a value that was observed.
func median(v []uint64) uint64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// oomConfigs counts, per trial label, the sharing OOMs of all PARs' mixes,
// most frequent first (ties by label), at most MaxOOMConfigs of them.
func oomConfigs(rs []MixStats) []ConfigCount {
	n := map[string]int{}
	for _, r := range rs {
		for _, l := range r.OOMLabels {
			n[l]++
		}
	}
	var out []ConfigCount
	for l, c := range n {
		out = append(out, ConfigCount{Label: l, OOMs: c})
	}
	slices.SortFunc(out, func(a, b ConfigCount) int {
		if a.OOMs != b.OOMs {
			return b.OOMs - a.OOMs
		}
		return strings.Compare(a.Label, b.Label)
	})
	if len(out) > MaxOOMConfigs {
		out = out[:MaxOOMConfigs]
	}
	return out
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/gpu"
	simpar "github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/sim/study"
	"github.com/memreplay/memreplay/sim/workers"
)

const parHelp = `Usage: memreplay par [flags] [TRACE ...]

Answers "how many trials fit on this GPU at once, with which allocator
settings" before the study runs. For each --alloc-conf and each PAR k from 1
to --max-par it runs --mixes random mixes on a simulated GPU: k worker
processes, each with its own CUDA context and caching allocator, sharing the
GPU's memory, starting at random offsets and running --trials-per-worker
trials in turn (their caches carry over, as an Optuna worker's does). Trials
are drawn from a search space (--space; by default the BERT-family study on
a 24 GiB card, see below; or an Optuna study's space with --optuna-storage URL
--study NAME, read through Optuna: docs/optuna.md), or from TRACE files (a
file's trial_start/trial_end pairs, or the whole file, are its trials).

For every k it prints OOMs, alloc retries, the GPU's peak use against its
capacity, headroom, waste, P(at least one OOM in a mix) with its Wilson
upper bound at --confidence, and trials per hour relative to PAR 1; then the
largest PAR that is safe at that confidence (its bound, and every smaller
PAR's, below 1 - confidence), next to the hand estimate
floor(0.9 x capacity / (peak reserved of one trial + context)). The same
seed gives the same report. A full search takes a minute or two: progress
(mixes done, time left) shows on stderr when it is a terminal.
docs/par.md explains the model.
` + studySpaceHelp + allocSettingsHelp + `
Between trials (each worker, after each of its trials):
  (nothing)       the cache stays as the trial left it: the next trial reuses
                  its free blocks, and other workers cannot have that memory
  --empty-cache   torch.cuda.empty_cache(): every cached segment with no live
                  block goes back to the GPU, for any worker to use
  --double-clear  empty_cache(), synchronize(), gc.collect(), empty_cache():
                  the second empty_cache also returns blocks that waited on
                  another stream's work at the first

Examples:
  # 24 GiB, the BERT-family study, PyTorch's defaults vs expandable segments
  memreplay par
  # more mixes for a 95% answer, and the fix that empties the cache between trials
  memreplay par --mixes 60 --confidence 0.95 --empty-cache
  # a 40 GiB card, PAR up to 8, the space from a file
  memreplay par --capacity 40GiB --max-par 8 --space space.json
  # recorded traces instead of the model (each file's trials are drawn at random)
  memreplay par --capacity 16GiB run1.mrt run2.pickle --alloc-conf "" \
      --alloc-conf expandable_segments:True,max_split_size_mb:128
  # what better allocator policies buy: PyTorch's, stitch and lifetime, each under every --alloc-conf
  memreplay par --policy pytorch --policy stitch --policy lifetime
  # Markdown for a PR or docs, and the charts as a page
  memreplay par --format markdown --html par.html > par.md
  # a large search over 8 machines (or a Kubernetes Indexed Job, a Slurm
  # array: docs/par.md), then one report, the same as one machine's
  memreplay par --mixes 256 --shard 3/8 -o part-3.json
  memreplay par --merge part-*.json

Flags:
`

func parCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("par", parHelp, stderr)
	capacity := fs.String("capacity", "24GiB", "GPU memory: a size, or rtx-24gb (23.56 GiB, a 24 GB card as PyTorch reports it)")
	ctx := fs.String("context-overhead", fmt.Sprintf("%dMiB", gpu.DefaultContextOverhead>>20), "memory each process's CUDA context takes")
	policies := fs.StringArray("policy", nil, "allocator policies to compare, each under every --alloc-conf (repeatable; default: pytorch): "+strings.Join(allocator.PolicyNames(), ", "))
	confs := fs.StringArray("alloc-conf", nil, `allocator settings to compare, PYTORCH_CUDA_ALLOC_CONF syntax (repeatable; "" is PyTorch's defaults; default: "" and expandable_segments:True)`)
	maxPAR := fs.Int("max-par", simpar.DefaultMaxPAR, "largest PAR to try (k = 1..max-par)")
	mixes := fs.Int("mixes", simpar.DefaultMixes, "random mixes per PAR and setting")
	seed := fs.Uint64("seed", 1, "seed of the mixes (the same seed gives the same report)")
	confidence := fs.Float64("confidence", simpar.DefaultConfidence, "confidence of the safe-PAR answer, in (0, 1)")
	perWorker := fs.Int("trials-per-worker", simpar.DefaultTrialsPerWorker, "trials each worker runs in turn in a mix")
	spaceFile := fs.String("space", "", "search space JSON file (default: the BERT-family study; docs/trials.md gives the format)")
	optStorage := fs.String("optuna-storage", "", "the search space of an Optuna study (with --study), read from its storage URL through Optuna (docs/optuna.md)")
	optStudy := fs.String("study", "", "the Optuna study's name (with --optuna-storage)")
	optFixed := fs.StringArray("optuna-fixed", nil, "KEY=VALUE for what the Optuna study does not search, e.g. seq_len=128 (repeatable)")
	optName := fs.StringArray("optuna-name", nil, "KEY=PARAM: the Optuna study's parameter name for a memreplay key, e.g. batch=bs (repeatable)")
	unconstrained := fs.Bool("unconstrained", false, "drop the space's model-aware limits (every model draws from the full lists, as the BERT-family study did before its OOM fix)")
	steps := fs.Int("steps", 0, "optimizer steps per trial (0: the space's, else sim/trial's default); fewer run faster")
	share := fs.Float64("trial-share", simpar.DefaultShare, "fraction of the GPU's compute one trial uses alone (an assumption: measure it)")
	emptyCache := fs.Bool("empty-cache", false, "torch.cuda.empty_cache() after every trial")
	doubleClear := fs.Bool("double-clear", false, "the double clear after every trial: empty_cache, synchronize, gc.collect, empty_cache")
	limits := fs.Int("limits", 0, "also compute, for this target PAR, each model's largest batch and sequence length (peaks per model x batch x length from the trial model) and print them as a space (needs a space, not traces)")
	limitsSpace := fs.String("limits-space", "", "with --limits: write the limited space to this JSON file (feed it back with --space)")
	packed := fs.Bool("packed", true, "also run each mix's trials under the packed schedule (admitted by their memory, at most --max-par at once); false: fixed PARs only")
	parallel := fs.Int("parallel", 0, "mixes run at once (0: one per CPU); does not change the report")
	format := fs.String("format", "table", "output: table, json or markdown")
	fs.Bool("no-color", false, "accepted for scripts (the output has no colour)")
	html := fs.String("html", "", "also write a self-contained HTML page with P(OOM) and throughput against PAR to this file")
	showProgress := fs.Bool("progress", true, "show progress (mixes done, time left) on stderr when it is a terminal")
	shard := fs.String("shard", "", "run only shard i of n (i/n, i from 0): the mixes whose number is i mod n, written as a partial result for --merge (docs/par.md, Sweeps across machines)")
	out := fs.StringP("output", "o", "", "with --shard: write the partial result to this file instead of stdout")
	merge := fs.Bool("merge", false, "the arguments are the partial results of every --shard i/n of one search: print that search's report")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *merge {
		return parMerge(fs, stdout, *format, *html)
	}
	if err := checkShardFlags(fs, *shard, *out, *format); err != nil {
		return err
	}
	if *html != "" {
		if err := canWrite("--html", *html); err != nil {
			return err
		}
	}
	if *limitsSpace != "" {
		if err := canWrite("--limits-space", *limitsSpace); err != nil {
			return err
		}
	}
	o := simpar.Options{
		MaxPAR: *maxPAR, Mixes: *mixes, Seed: *seed, Confidence: *confidence,
		TrialsPerWorker: *perWorker, Share: *share, Parallel: *parallel, Packed: *packed,
		Policy: workers.Policy{EmptyCacheBetweenTrials: *emptyCache, DoubleClear: *doubleClear},
	}
	var err error
	if o.Capacity, err = parseCapacity(*capacity); err != nil {
		return usageError{fmt.Errorf("--capacity: %v", err)}
	}
	if o.ContextOverhead, err = parseSize(*ctx); err != nil {
		return usageError{fmt.Errorf("--context-overhead: %v", err)}
	}
	switch {
	case *maxPAR < 1 || *maxPAR > 64:
		return usageError{fmt.Errorf("--max-par %d: want 1..64", *maxPAR)}
	case *mixes < 1 || *mixes > simpar.MaxMixes:
		return usageError{fmt.Errorf("--mixes %d: want 1..%d", *mixes, simpar.MaxMixes)}
	case *perWorker < 1 || *perWorker > simpar.MaxTrialsPerWorker:
		return usageError{fmt.Errorf("--trials-per-worker %d: want 1..%d", *perWorker, simpar.MaxTrialsPerWorker)}
	case !(*confidence > 0 && *confidence < 1):
		return usageError{fmt.Errorf("--confidence %v: want a value in (0, 1), e.g. 0.9", *confidence)}
	case !(*share > 0 && *share <= 1):
		return usageError{fmt.Errorf("--trial-share %v: want a value in (0, 1]", *share)}
	case *steps < 0:
		return usageError{fmt.Errorf("--steps %d: want 0 or more", *steps)}
	case o.ContextOverhead >= o.Capacity:
		return usageError{fmt.Errorf("--context-overhead %s is not below --capacity %s", *ctx, *capacity)}
	case (*optStorage == "") != (*optStudy == ""):
		return usageError{fmt.Errorf("--optuna-storage and --study go together")}
	case *optStorage != "" && (*spaceFile != "" || fs.NArg() > 0):
		return usageError{fmt.Errorf("--optuna-storage, --space and trace files exclude each other: trials come from one of them")}
	case *limits < 0 || *limits > 64:
		return usageError{fmt.Errorf("--limits %d: want a target PAR in 1..64 (0: none)", *limits)}
	case *limits > 0 && fs.NArg() > 0:
		return usageError{fmt.Errorf("--limits needs a search space: trace files have no batch or length to limit")}
	case *limitsSpace != "" && *limits == 0:
		return usageError{fmt.Errorf("--limits-space goes with --limits K")}
	case fs.NArg() > 0 && (*spaceFile != "" || *unconstrained || *steps != 0):
		return usageError{fmt.Errorf("trace files and --space/--unconstrained/--steps exclude each other: trials come from one or the other")}
	}
	if len(*confs) == 0 {
		*confs = []string{"", "expandable_segments:True"}
	}
	if len(*policies) == 0 {
		*policies = []string{"pytorch"}
	}
	for _, name := range *policies {
		pol, err := parsePolicy(name)
		if err != nil {
			return err
		}
		for _, c := range *confs {
			cfg, err := parseAllocConf(c)
			if err != nil {
				return err
			}
			s := simpar.Setting{Name: c, Config: *cfg, Policy: pol}
			if name != "pytorch" {
				if c == "" {
					s.Name = "policy " + name
				} else {
					s.Name = c + " + policy " + name
				}
			}
			o.Settings = append(o.Settings, s)
		}
	}

	var limSpace study.Space
	if fs.NArg() > 0 {
		trials, notes, err := simpar.FromTraces(fs.Args())
		if err != nil {
			return inputError{err}
		}
		for _, n := range notes {
			fmt.Fprintf(stderr, "memreplay par: %s\n", n)
		}
		o.Sample = simpar.Pool(trials)
		if o.Workload, err = filesIdentity(fs.Args()); err != nil {
			return inputError{err}
		}
		o.Source = fmt.Sprintf("%d trials from %s", len(trials), strings.Join(fs.Args(), ", "))
	} else {
		space := study.BERTFamilySpace()
		o.Source = "the BERT-family study's search space"
		if *spaceFile != "" {
			if space, err = study.LoadSpace(*spaceFile); err != nil {
				return inputError{err}
			}
			o.Source = "search space " + *spaceFile
		}
		if *optStorage != "" {
			if space, err = optunaSpace(*optStorage, *optStudy, *optFixed, *optName, stderr); err != nil {
				return err
			}
			o.Source = fmt.Sprintf("the search space of Optuna study %q", *optStudy)
		}
		if *unconstrained {
			space = space.Unconstrained()
			o.Source += ", unconstrained"
		}
		if *steps > 0 {
			o.Source += fmt.Sprintf(", %d steps per trial", *steps)
		}
		o.Sample = simpar.FromSpecs(space.Sample, *steps)
		if o.Workload, err = spaceIdentity(space); err != nil {
			return err
		}
		limSpace = space
		if *steps > 0 {
			limSpace.Steps = *steps
		}
	}

	if p := newProgress(stderr, "par", 0, *showProgress); p != nil {
		o.Progress = p.mixes
		defer p.done()
	}
	if *shard != "" {
		return runShard(o, *shard, *out, stdout)
	}
	rep, err := simpar.Run(o)
	if err != nil {
		return err
	}
	var lim *study.Limits
	if *limits > 0 {
		// The first setting's allocator: the peaks are its.
		if lim, err = study.ModelLimits(limSpace, o.Capacity, o.ContextOverhead, o.Settings[0].Config, o.Settings[0].Policy, *limits, *parallel); err != nil {
			return err
		}
		if *limitsSpace != "" {
			b, err := json.MarshalIndent(lim.Space, "", "  ")
			if err != nil {
				return err
			}
			// Through outfile like every other output: a failure keeps
			// the old space file, a device is written through, a
			// read-only file is refused.
			if err := writeFile(*limitsSpace, append(b, '\n')); err != nil {
				return err
			}
		}
	}
	return renderPar(stdout, rep, lim, *format, *html, *limitsSpace)
}

// renderPar writes the report (and the limits, when computed) in the
// format asked, and the page when asked: for a run and a merge alike.
func renderPar(stdout io.Writer, rep *simpar.Report, lim *study.Limits, format, html, limitsSpace string) error {
	if html != "" {
		sec := parSection(rep)
		if lim != nil {
			sec.Notes = append(sec.Notes, limitsNotes(lim)...)
		}
		if err := writeHTML(html, &report.HTMLReport{Title: "memreplay par", PAR: sec}); err != nil {
			return err
		}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if lim != nil {
			return enc.Encode(struct {
				*simpar.Report
				Limits *study.Limits `json:"limits"`
			}{rep, lim})
		}
		return enc.Encode(rep)
	case "markdown":
		if err := simpar.WriteMarkdown(stdout, rep); err != nil || lim == nil {
			return err
		}
		return writeLimits(stdout, lim, limitsSpace, true)
	}
	if err := simpar.WriteTable(stdout, rep); err != nil || lim == nil {
		return err
	}
	return writeLimits(stdout, lim, limitsSpace, false)
}

func writeLimits(w io.Writer, lim *study.Limits, file string, md bool) error {
	if err := study.WriteLimits(w, lim, md); err != nil {
		return err
	}
	if file != "" {
		_, err := fmt.Fprintf(w, "\nThe limited space is in %s: memreplay par --space %s --max-par %d --empty-cache checks the promise "+
			"(the limits hold for workers that empty their cache between trials; a kept cache carries one trial's segments into the next).\n", file, file, lim.PAR)
		return err
	}
	return nil
}

// limitsNotes are the limits as lines of the page.
func limitsNotes(l *study.Limits) []string {
	var out []string
	for _, m := range l.Models {
		if !m.Allowed {
			out = append(out, fmt.Sprintf("PAR %d limit, %s: no configuration fits %d times", l.PAR, m.Model, l.PAR))
			continue
		}
		out = append(out, fmt.Sprintf("PAR %d limit, %s: batch up to %d, sequence length up to %d, grad-accum %v (peak reserved %s)",
			l.PAR, m.Model, m.MaxBatch, m.MaxSeqLen, m.GradAccum, allocator.FormatSize(m.PeakReserved)))
	}
	return out
}

// parSection is the page's view of a PAR search: P(OOM) and trials per
// hour for each setting and PAR, and where each setting saturates (the
// first PAR at which a mix ran out of memory).
func parSection(r *simpar.Report) *report.PARSection {
	sec := &report.PARSection{
		Title: fmt.Sprintf("%s GPU, %s per context; %s; %d mixes per PAR, seed %d",
			allocator.FormatSize(r.Capacity), allocator.FormatSize(r.ContextOverhead), r.Source, r.Mixes, r.Seed),
		ThroughputUnit: "trials/h",
	}
	for k := 1; k <= r.MaxPAR; k++ {
		sec.K = append(sec.K, k)
	}
	for _, res := range r.Results {
		name := res.Setting
		if name == "" {
			name = "(PyTorch defaults)"
		}
		sec.Settings = append(sec.Settings, name)
		poom := make([]float64, len(sec.K))
		tput := make([]float64, len(sec.K))
		for j := range sec.K {
			poom[j], tput[j] = math.NaN(), math.NaN()
		}
		for _, row := range res.Rows {
			if j := row.PAR - 1; j >= 0 && j < len(sec.K) {
				poom[j], tput[j] = row.POOM, row.TrialsPerHour
			}
		}
		sec.POOM = append(sec.POOM, poom)
		sec.Throughput = append(sec.Throughput, tput)
		sat := 0
		if res.NoOOMPAR < r.MaxPAR {
			sat = res.NoOOMPAR + 1
		}
		sec.Saturation = append(sec.Saturation, sat)
		sec.Notes = append(sec.Notes, fmt.Sprintf("%s: safe PAR at %s confidence %d, no OOM seen up to PAR %d, naive estimate %d (median trial) / %d (largest)",
			name, fmt.Sprintf("%.0f%%", 100*r.Confidence), res.SafePAR, res.NoOOMPAR, res.NaiveMedian, res.NaiveMax))
		if pk := res.Packed; pk != nil {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s, packed (trials admitted by their memory, at most %d at once): %d/%d mixes with an OOM, %.1f trials/h (%.2fx PAR 1)",
				name, r.MaxPAR, pk.MixesWithOOM, pk.Mixes, pk.TrialsPerHour, pk.Speedup))
		}
	}
	return sec
}

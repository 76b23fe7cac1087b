package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/memreplay/memreplay/sim/study"
)

const trialsHelp = `Usage: memreplay trials [flags]
       memreplay trials --report STATE.jsonl [STATE.jsonl ...]

Runs a hyperparameter study on a simulated GPU: --trials trials drawn from a
search space (--space; by default the BERT-family study on a 24 GiB card,
with its model-aware batch limits, see below), --par worker processes
sharing the GPU, each with its own CUDA context and caching allocator, and
the fixes such a study tries as switches (below). It reports completed, pruned and failed trials, alloc retries,
restarts, trials per simulated hour, and how fragmentation and "reserved but
unallocated" move over the study.

With --state the study is written as it goes (JSON Lines, a line per
finished trial, fsynced): a killed study continues with --resume and the
same flags, and loses no finished trial. --report prints finished or
interrupted studies from their state files, side by side.

Sticky device errors need a cause: --oom-corrupts P makes an OOM corrupt the
worker's CUDA context with probability P, so that its next trial fails at
its first CUDA call (what the BERT-family study's reports describe as "OOM
causes CUDA assert, assert corrupts context"); --fault-rate P gives each
trial a random sticky error. Without --restart-on-error a worker stops at
its first failure.
` + studySpaceHelp + allocSettingsHelp + `
The fixes, each a switch:
  --prune-on-oom      (on by default) an OOM ends that trial, its tensors
                      are freed and the worker takes the next; off, the
                      study stops at the first OOM
  --empty-cache       torch.cuda.empty_cache() after each trial: cached
                      segments with no live block go back to the GPU
  --double-clear      empty_cache(), synchronize(), gc.collect(),
                      empty_cache(): also returns what waited on a stream
  --reset-every N     the worker's process exits and a fresh one starts
                      every N trials: a new CUDA context, an empty cache
  --estimate-prune    before a trial runs, estimate its peak from its
                      hyperparameters; prune it if that (plus
                      --estimate-margin) does not fit capacity/PAR
  --restart-on-error  after a sticky device error (a corrupted context),
                      start a fresh process instead of stopping the worker

Examples: the BERT-family study on a 24 GiB GPU, fix by fix
  # PAR 4 with PyTorch's defaults; OOMs corrupt contexts, a supervisor restarts
  memreplay trials --trials 300 --par 4 --oom-corrupts 0.5 --restart-on-error --state par4.jsonl
  # the space before the model-aware limits, and no OOM handling at all
  memreplay trials --trials 300 --par 4 --unconstrained --prune-on-oom=false
  # the study's fixes: expandable segments, the double clear, a reset every 50 trials, PAR 3
  memreplay trials --trials 300 --par 3 --oom-corrupts 0.5 --restart-on-error \
      --alloc-conf expandable_segments:True --double-clear --reset-every 50 --state par3.jsonl
  # ... and PAR 2, with the pre-trial estimate pruning what cannot fit
  memreplay trials --trials 300 --par 2 --oom-corrupts 0.5 --restart-on-error \
      --alloc-conf expandable_segments:True --double-clear --reset-every 50 --estimate-prune --state par2.jsonl
  # PAR 4 again with the stitch allocator policy instead of PyTorch's
  memreplay trials --trials 300 --par 4 --oom-corrupts 0.5 --restart-on-error --policy stitch --state par4-stitch.jsonl
  # the three side by side
  memreplay trials --report par4.jsonl par3.jsonl par2.jsonl
  # a killed study continues where it stopped (same flags plus --resume)
  memreplay trials --trials 300 --par 4 --oom-corrupts 0.5 --restart-on-error --state par4.jsonl --resume

Flags:
`

func trialsCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trials", trialsHelp, stderr)
	trials := fs.Int("trials", 100, "trials in the study (grid sampler: 0 means the whole grid)")
	par := fs.Int("par", 1, "parallel workers (processes) sharing the GPU")
	sampler := fs.String("sampler", "random", "random or grid (the grid in an order shuffled by --seed)")
	spaceFile := fs.String("space", "", "search space JSON file (default: the BERT-family study; docs/trials.md gives the format)")
	unconstrained := fs.Bool("unconstrained", false, "drop the space's model-aware limits (every model draws from the full lists, as the BERT-family study did before its OOM fix)")
	steps := fs.Int("steps", 0, "optimizer steps per trial, when given (otherwise the space's; 0: sim/trial's default, 10)")
	capacity := fs.String("capacity", "24GiB", "GPU memory: a size, or rtx-24gb (23.56 GiB, a 24 GB card as PyTorch reports it)")
	ctxOverhead := fs.String("context-overhead", "", "CUDA context per process (default 500MiB)")
	allocConf := fs.String("alloc-conf", "", "PYTORCH_CUDA_ALLOC_CONF of every worker")
	policyName := fs.String("policy", "pytorch", "every worker's "+policyUsage)
	state := fs.String("state", "", "state file (JSON Lines) written as the study goes")
	resume := fs.Bool("resume", false, "continue the study in --state (a missing file starts it)")
	seed := fs.Uint64("seed", 1, "the study's seed (sampler, faults)")
	pruneOnOOM := fs.Bool("prune-on-oom", true, "an OOM prunes the trial and the study goes on; false: the study stops at the first OOM")
	emptyCache := fs.Bool("empty-cache", false, "torch.cuda.empty_cache() after each trial")
	doubleClear := fs.Bool("double-clear", false, "empty_cache(); synchronize(); gc.collect(); empty_cache() after each trial")
	resetEvery := fs.Int("reset-every", 0, "reset each worker every N trials (--reset-kind); 0: never")
	resetKind := fs.String("reset-kind", study.ResetRestart, "what --reset-every does: restart (the process exits, a fresh context starts) or clear (the BERT-family study's \"GPU reset\": empty_cache, synchronize, gc.collect, empty_cache in the same process)")
	estimatePrune := fs.Bool("estimate-prune", false, "prune trials whose estimated peak does not fit capacity/PAR before they run")
	estimateBy := fs.String("estimate-by", study.EstimateByHand, "what --estimate-prune predicts with: hand (the hand count x (1 + margin)) or replay (memreplay estimate's peak reserved + context)")
	estimateMargin := fs.Float64("estimate-margin", study.DefaultEstimateMargin, "allocator overhead added to the estimate (0.1 = 10%)")
	restart := fs.Bool("restart-on-error", false, "restart a worker with a fresh context after a sticky device error")
	maxFailures := fs.Int("max-failures", 3, "give a worker up after this many failed trials in a row")
	oomCorrupts := fs.Float64("oom-corrupts", 0, "probability that an OOM corrupts the worker's context (its next trial fails)")
	faultRate := fs.Float64("fault-rate", 0, "probability of a random sticky device error per trial")
	stagger := fs.Duration("stagger", 0, "start worker i at i times this")
	share := fs.Float64("compute-share", 0, "fraction of the GPU's compute one trial uses alone, (0, 1]; default 1 (trials time-slice)")
	gap := fs.Duration("gap", 0, "each worker's setup time between trials")
	startup := fs.Duration("startup", 0, "a fresh process's start-up time (resets, restarts)")
	schedule := fs.String("schedule", "fixed", "fixed (--par workers), packed (a trial starts when its predicted memory fits; --par caps how many at once, default 8) or compare (fixed PAR 1..--compare-max-par and packed, same trials, side by side)")
	predict := fs.String("predict", study.ReplayPredictor, "packed: a trial's peak reserved from the whole trial model run alone (replay), from memreplay estimate's few steps run alone (estimate: the figure python/memreplay's gate admits by) or the analytic estimate with a learned correction (analytic)")
	packMargin := fs.Float64("pack-margin", 0, "packed: starting safety margin over the learned need (0: 5%); OOMs and retries widen it")
	compareMax := fs.Int("compare-max-par", 4, "compare: the largest fixed PAR to run")
	format := fs.String("format", "table", "output: table, json or markdown")
	fs.Bool("no-color", false, "accepted for scripts (the output has no colour)")
	reportOnly := fs.Bool("report", false, "report the state files given as arguments instead of running")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *reportOnly {
		if fs.NArg() == 0 {
			return usageError{errors.New("--report: give one or more state files")}
		}
		var reps []study.Report
		for _, p := range fs.Args() {
			st, err := study.LoadState(p)
			if err != nil {
				return inputError{err}
			}
			if st.Torn {
				fmt.Fprintf(stderr, "memreplay trials: warning: %s: its last line is torn (a killed run); reporting the lines before it\n", p)
			}
			reps = append(reps, study.Summarize(st, 0))
		}
		return writeStudies(stdout, *format, reps)
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Errorf("unexpected arguments %q (state files go with --report)", fs.Args())}
	}

	if _, err := parsePolicy(*policyName); err != nil {
		return err
	}
	if *policyName == "pytorch" {
		*policyName = "" // spelt as before in the state file's header
	}
	o := study.Options{Sampler: *sampler, Trials: *trials, Workers: *par, Seed: *seed, AllocConf: *allocConf, AllocPolicy: *policyName,
		State: *state, Resume: *resume, Warn: trialsWarnWriter{stderr},
		Stagger: *stagger, ComputeShare: *share, Gap: *gap, StartupCost: *startup,
		Policy: study.Policy{PruneOnOOM: *pruneOnOOM, EmptyCache: *emptyCache, DoubleClear: *doubleClear,
			ResetEvery: *resetEvery, EstimatePrune: *estimatePrune, EstimateMargin: *estimateMargin, EstimateBy: *estimateBy,
			RestartOnError: *restart, MaxFailures: *maxFailures, OOMCorrupts: *oomCorrupts, FaultRate: *faultRate},
		Packing: study.Packing{Predict: *predict, Margin: *packMargin}}
	switch *resetKind {
	case study.ResetRestart:
	case study.ResetClear:
		o.Policy.ResetKind = study.ResetClear
	default:
		return usageError{fmt.Errorf("--reset-kind %q: want restart or clear", *resetKind)}
	}
	switch *schedule {
	case study.FixedSchedule, study.PackedSchedule, "compare":
	default:
		return usageError{fmt.Errorf("--schedule %q: want fixed, packed or compare", *schedule)}
	}
	if *schedule != study.FixedSchedule {
		if !fs.Changed("par") {
			o.Workers = study.DefaultPackedMax
		}
		if *predict != study.AnalyticPredictor && *predict != study.ReplayPredictor && *predict != study.EstimatePredictor {
			return usageError{fmt.Errorf("--predict %q: want replay, estimate or analytic", *predict)}
		}
		if *packMargin < 0 {
			return usageError{fmt.Errorf("--pack-margin %v: want 0 or more", *packMargin)}
		}
	} else if fs.Changed("predict") || fs.Changed("pack-margin") {
		return usageError{errors.New("--predict and --pack-margin go with --schedule packed or compare")}
	}
	if *schedule == study.PackedSchedule {
		if *estimatePrune {
			return usageError{errors.New("--estimate-prune and --schedule packed exclude each other: packing prunes what cannot fit alone and admits the rest by memory")}
		}
		o.Schedule = study.PackedSchedule
	}
	if *estimateMargin == study.DefaultEstimateMargin {
		o.Policy.EstimateMargin = 0 // the default, spelt the same in every header
	}
	var err error
	if o.Capacity, err = parseCapacity(*capacity); err != nil {
		return usageError{fmt.Errorf("--capacity: %v", err)}
	}
	if *ctxOverhead != "" {
		if o.ContextOverhead, err = parseSize(*ctxOverhead); err != nil {
			return usageError{fmt.Errorf("--context-overhead: %v", err)}
		}
	}
	if _, err := parseAllocConf(*allocConf); err != nil {
		return err
	}
	if *spaceFile != "" {
		if o.Space, err = study.LoadSpace(*spaceFile); err != nil {
			return inputError{err}
		}
	} else {
		o.Space = study.BERTFamilySpace()
	}
	if *unconstrained {
		o.Space = o.Space.Unconstrained()
	}
	if fs.Changed("steps") {
		if *steps < 0 {
			return usageError{fmt.Errorf("--steps %d: want 0 (the default) or more", *steps)}
		}
		o.Space.Steps = *steps
	}
	if *resume && *state == "" {
		return usageError{errors.New("--resume needs --state FILE")}
	}
	if err := checkStudyFlags(o); err != nil {
		return usageError{err}
	}
	if *schedule == "compare" {
		if *state != "" || *resume {
			return usageError{errors.New("--schedule compare runs several studies in memory: no --state or --resume")}
		}
		if *compareMax < 1 || *compareMax > 64 {
			return usageError{fmt.Errorf("--compare-max-par %d: want 1..64", *compareMax)}
		}
		reps, err := study.CompareSchedules(o, *compareMax)
		if err != nil {
			return err
		}
		return writeStudies(stdout, *format, reps)
	}
	res, err := study.Run(o)
	if err != nil {
		return err
	}
	return writeStudies(stdout, *format, []study.Report{study.Summarize(res.State, res.Planned)})
}

// maxTrialsPar bounds --par. Every worker is a process with its own CUDA
// context (500 MiB by default), so even an 80 GB card holds fewer than 200
// of them: a larger --par is a typo, answered at once rather than with a
// run of tens of thousands of idle workers.
const maxTrialsPar = 1024

// checkStudyFlags catches bad values before a state file is created, so
// that a typo does not leave an empty study behind.
func checkStudyFlags(o study.Options) error {
	p := o.Policy
	switch {
	case o.Trials < 0 || o.Trials == 0 && o.Sampler != study.GridSampler:
		return fmt.Errorf("--trials %d: want at least 1", o.Trials)
	case o.Workers < 1 || o.Workers > maxTrialsPar:
		return fmt.Errorf("--par %d: want 1..%d", o.Workers, maxTrialsPar)
	case o.Sampler != study.RandomSampler && o.Sampler != study.GridSampler:
		return fmt.Errorf("--sampler %q: want random or grid", o.Sampler)
	case p.EstimateBy != study.EstimateByHand && p.EstimateBy != study.EstimateByReplay:
		return fmt.Errorf("--estimate-by %q: want hand or replay", p.EstimateBy)
	case p.OOMCorrupts < 0 || p.OOMCorrupts > 1:
		return fmt.Errorf("--oom-corrupts %v: want a probability in [0, 1]", p.OOMCorrupts)
	case p.FaultRate < 0 || p.FaultRate > 1:
		return fmt.Errorf("--fault-rate %v: want a probability in [0, 1]", p.FaultRate)
	case p.ResetEvery < 0:
		return fmt.Errorf("--reset-every %d: want 0 (never) or more", p.ResetEvery)
	case p.MaxFailures < 1:
		return fmt.Errorf("--max-failures %d: want at least 1", p.MaxFailures)
	case p.EstimateMargin < 0:
		return fmt.Errorf("--estimate-margin %v: want 0 or more", p.EstimateMargin)
	case o.ComputeShare < 0 || o.ComputeShare > 1:
		return fmt.Errorf("--compute-share %v: want a fraction in (0, 1]", o.ComputeShare)
	case o.Stagger < 0 || o.Gap < 0 || o.StartupCost < 0:
		return errors.New("--stagger, --gap and --startup cannot be negative")
	}
	if o.Sampler == study.GridSampler && o.Trials > o.Space.GridSize() {
		return fmt.Errorf("--trials %d: the grid has only %d combinations", o.Trials, o.Space.GridSize())
	}
	return nil
}

func writeStudies(w io.Writer, format string, reps []study.Report) error {
	switch format {
	case "json":
		return study.WriteJSON(w, reps)
	case "markdown":
		return study.WriteMarkdown(w, reps)
	}
	return study.WriteTable(w, reps)
}

// trialsWarnWriter writes the study's warnings as "memreplay trials: warning: ...".
type trialsWarnWriter struct{ w io.Writer }

func (p trialsWarnWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "memreplay trials: %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
}

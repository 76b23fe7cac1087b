package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/demo"
)

const demoHelp = `Run the caching allocator on a built-in workload: BERT-base fine-tuning
trials of random batch size and sequence length, one after another in one
process on a simulated GPU, under each allocator setting given, and compare
what PyTorch's allocator would have reserved, stranded and retried. The
workload is a quick sketch of such trials; 'memreplay trials' and
'memreplay par' run the calibrated trial model (docs/trial-model.md), and
'memreplay replay' a real trace.

Usage:
  memreplay demo [flags]

Examples:
  memreplay demo
  memreplay demo --alloc-conf "" --alloc-conf expandable_segments:True
  memreplay demo --capacity 16GiB --trials 50 --empty-cache
  memreplay demo --alloc-conf max_split_size_mb:128 --fail-on-oom

Flags:
`

func demoCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoHelp, stderr)
	confs := fs.StringArray("alloc-conf", nil, "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax; repeat to compare (default: \"\" and expandable_segments:True)")
	capacity := fs.String("capacity", "24GiB", "simulated device memory")
	o := demo.DefaultOptions()
	fs.IntVar(&o.Trials, "trials", o.Trials, "number of trials")
	fs.IntVar(&o.StepsPerTrial, "steps", o.StepsPerTrial, "training steps per trial")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed for the trials' shapes")
	fs.BoolVar(&o.EmptyCacheBetweenTrials, "empty-cache", false, "call empty_cache between trials")
	failOnOOM := fs.Bool("fail-on-oom", false, "exit 1 if any trial hit an out-of-memory error")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	c, err := parseSize(*capacity)
	if err != nil {
		return usageError{fmt.Errorf("--capacity: %v", err)}
	}
	o.Capacity = c
	if o.Trials < 1 || o.StepsPerTrial < 1 {
		return usageError{fmt.Errorf("--trials and --steps must be at least 1")}
	}
	if len(*confs) == 0 {
		*confs = []string{"", "expandable_segments:True"}
	}
	for _, conf := range *confs {
		if _, err := config.Parse(conf); err != nil {
			return usageError{fmt.Errorf("--alloc-conf: %v", err)}
		}
	}

	fmt.Fprintf(stdout, "Built-in workload: %d BERT-base fine-tuning trials x %d steps on a simulated %s GPU (seed %d)\n\n",
		o.Trials, o.StepsPerTrial, allocator.FormatSize(o.Capacity), o.Seed)
	table := tablewriter.NewTable(stdout, tablewriter.WithRowAlignment(tw.AlignRight))
	table.Header("alloc conf", "trials OOM", "peak allocated", "peak reserved", "waste at peak", "unallocated at first OOM",
		"alloc retries", "device allocs/frees", "modelled device time")
	var results []demo.Result
	for _, conf := range *confs {
		r, err := demo.Run(conf, o)
		if err != nil {
			return err
		}
		results = append(results, r)
		name := conf
		if name == "" {
			name = "(default)"
		}
		if err := table.Append(name, fmt.Sprintf("%d/%d", r.TrialsOOM, r.TrialsRun),
			allocator.FormatSize(r.PeakAllocated), allocator.FormatSize(r.PeakReserved),
			fmt.Sprintf("%.1f%%", 100*(1-float64(r.PeakAllocated)/float64(r.PeakReserved))),
			oomText(r), strconv.FormatInt(r.Stats.NumAllocRetries, 10),
			fmt.Sprintf("%d/%d", r.Stats.NumDeviceAlloc, r.Stats.NumDeviceFree), r.DeviceTime.Round(time.Microsecond).String()); err != nil {
			return err
		}
	}
	if err := table.Render(); err != nil {
		return err
	}
	oom := false
	for _, r := range results {
		if r.FirstOOM != "" {
			oom = true
			fmt.Fprintf(stdout, "\nFirst OOM under %q:\n  %s\n", r.Conf, r.FirstOOM)
		}
	}
	if oom && *failOnOOM {
		return errCheckFailed
	}
	return nil
}

func oomText(r demo.Result) string {
	if r.FirstOOM == "" {
		return "no OOM"
	}
	return allocator.FormatSize(r.UnallocatedAtOOM)
}

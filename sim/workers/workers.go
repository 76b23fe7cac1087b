// Package workers runs k HPO worker processes on one simulated GPU, on one
// clock: the engine under `memreplay par` (sim/par) and the trial runner
// (sim/study).
//
// # Workers
//
// A worker is what the BERT-family study ran PAR of: a Python process with its
// own CUDA context and its own caching allocator, taking trials from the
// study one after another. Here it is a gpu.Process on the shared gpu.GPU
// (its context charged on the GPU's one physical memory) with its own
// allocator.Allocator, fed tasks by Options.Next. A task is one trial's
// events as a trace.Reader. The worker applies them as a PyTorch program
// would have made the requests: alloc is Malloc on the event's stream,
// free_requested is Free of the block the alloc's recorded address names (a
// map per worker, as sim/replay keeps; the recorded addresses are only names),
// free_completed returns a record_stream'd block once its streams caught up,
// record_stream, empty_cache and stream_sync do what they say; the recording
// allocator's decisions (segment_*, oom) and markers are not inputs and are
// skipped, and trial_start/trial_end only bracket the task. Whatever the
// trial still holds when its events end is freed, as its tensors die with it.
//
// Outcomes. An allocator.OutOfMemoryError ends the trial: under PruneOnOOM
// the worker frees every block the trial holds (Optuna prunes the trial when
// the exception unwinds, and the tensors go with the frames) and takes the
// next task, its cache as the failure left it; under StopOnOOM the run ends
// there. A sticky device error (Options.Fault makes one, through
// gpu.Process.InjectStickyError) corrupts the worker's context: the trial is
// Failed at the fault, since the next CUDA call of a training step (a kernel
// launch, microseconds away; the simulator does not model launches) reports
// it. With RestartOnStickyError the worker's process exits, freeing all it
// held, and a fresh one starts for the next task, as the BERT-family study's supervisor
// did; without it the worker stops. MaxConsecutiveFailures Failed trials in
// a row give the worker up. A fresh process whose context does not fit in
// what the other workers leave is a Failed trial as well (CUDA's
// initialisation error, which a supervisor treats alike): with restarts on,
// the worker tries again with its next task.
//
// Between trials the policy applies: a reset every ResetEvery trials (process
// exit and a fresh start), else the double clear (empty_cache, synchronize,
// gc.collect, which frees nothing here since the trial's blocks are already
// freed, empty_cache again) or a plain empty_cache; then Gap of setup time,
// and StartupCost more when a fresh process starts.
//
// # The clock
//
// Time is simulated. A task's events carry TimeUS, the time its program
// reached each request running alone on the GPU; rebased to the task's first
// event, the difference between two events is compute the trial needs before
// the next request. A worker's time also passes in what the trial does not
// compute: the modelled time of its device calls (the sim's CostModel: a
// cudaMalloc on a cache miss, the cudaFree and device synchronisation of a
// retry that releases the cache, map and unmap calls of expandable segments,
// the failing cudaMalloc of an OOM), the between-trial policy's calls, Gap,
// StartupCost and its Stagger. While it waits on such a call a worker does not
// compute.
//
// Contention. k trials on one GPU do not each run at full speed, but one
// small fine-tuning trial does not use the whole GPU either. The model is
// processor sharing with a per-trial share: a trial alone uses Compute.Share
// of the GPU (0 < Share <= 1); while n workers compute, each progresses at
// min(1, 1/(n·Share)) of its solo speed. So up to 1/Share trials run
// concurrently at full speed, and beyond that the GPU's throughput is the
// limit and the trials divide it. Share = 1 (the default) is plain time
// slicing: PAR then buys throughput only by filling gaps (device calls,
// setup); Share must come from measuring one trial alone (nvidia-smi's
// utilization, or trials/hour at PAR 1 and 2); it is a parameter, not
// something the engine can know. clock.go keeps this exact with a virtual
// compute clock.
//
// Order. Steps of all workers apply in global time order, ties broken by the
// worker index, so a run is a pure function of its Options: the engine uses
// no goroutines and no map iteration, and the same options give the same
// results. Done is called in time order of task ends, and Next in time order
// of the workers' requests, so a study that samples in Next sees a
// reproducible sequence.
package workers

import (
	"fmt"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/trace"
)

// Outcome is how a task ended.
type Outcome string

// The outcomes of a task.
const (
	Completed Outcome = "completed"
	PrunedOOM Outcome = "pruned_oom" // an OOM in the trial; its blocks were freed, the worker goes on
	Failed    Outcome = "failed"     // a sticky device error (corrupted context) ended the trial
)

// Task is one trial handed to a worker.
type Task struct {
	ID    int
	Label string
	Open  func() (trace.Reader, error) // a fresh reader of the trial's events (device 0)
}

// OOMPolicy says what an out-of-memory error does to the run.
type OOMPolicy string

// The OOM policies. Stop: the run ends at the first OOM (Run returns,
// Summary.Stopped set).
const (
	PruneOnOOM OOMPolicy = "prune"
	StopOnOOM  OOMPolicy = "stop"
)

// DefaultMaxConsecutiveFailures is Policy.MaxConsecutiveFailures when 0: the
// the study's supervisor gave a worker up after three.
const DefaultMaxConsecutiveFailures = 3

// Policy is what the workers do around trials: the BERT-family study's fixes.
type Policy struct {
	OnOOM                   OOMPolicy     // "" means PruneOnOOM
	EmptyCacheBetweenTrials bool          // torch.cuda.empty_cache() after each trial
	DoubleClear             bool          // the BERT-family study's empty_cache; synchronize; gc.collect(); empty_cache
	ResetEvery              int           // 0: never; N: the worker closes its process (context) and starts a fresh one every N trials
	RestartOnStickyError    bool          // a Failed trial restarts the worker with a fresh process; else the worker stops
	MaxConsecutiveFailures  int           // give the worker up after this many Failed trials in a row; 0 means 3
	Gap                     time.Duration // worker's setup time between trials
	// StartupCost is the wall time a fresh process takes before its first
	// trial (interpreter, imports, CUDA context creation), charged at every
	// process start after the first of each worker: resets and restarts.
	// 0: free.
	StartupCost time.Duration
	// ResetByClear makes ResetEvery's reset the BERT-family study's "GPU reset": the
	// double clear (empty_cache, synchronize, gc.collect, empty_cache) in
	// the same process, every ResetEvery trials, instead of a process exit.
	// The context stays, corrupted or not, and so does whatever the clear
	// cannot release.
	ResetByClear bool
}

// Fault injects a sticky device error (gpu.Process.InjectStickyError) into a
// task at its event number AtEvent (0 is the task's first event), with the
// error name (e.g. "cudaErrorIllegalAddress"); how studies model a corrupted
// context. A fault past the task's last event does not fire.
type Fault struct {
	AtEvent int64
	Name    string
}

// Compute is the contention model (package comment, "The clock").
type Compute struct {
	// Share is the fraction of the GPU's compute one trial uses when it runs
	// alone, in (0, 1]; 0 means 1 (trials time-slice the GPU).
	Share float64
}

// Options configure a run.
type Options struct {
	GPU   gpu.Options    // the shared device (capacity, context overhead, costs)
	Alloc *config.Config // every worker's allocator setting; nil: PyTorch's defaults
	// AllocPolicy is every worker's allocator policy; nil: PyTorch's.
	AllocPolicy allocator.Policy
	Workers     int             // at least 1
	Stagger     []time.Duration // start offset of each worker (missing entries: 0)
	Policy      Policy
	// Next hands worker w its next task at simulated time now; ok=false: w stops.
	Next func(w int, now time.Duration) (t Task, ok bool)
	// Hold, if set, is asked before Next each time worker w is free to
	// start a task: true parks w (no step, no process started) until a
	// task ends anywhere or a worker stops, when every parked worker asks
	// again, in worker order. It is how a scheduler that admits trials by
	// the memory they need (sim/packing) waits for room. Holding the last
	// worker that could make progress is an error Run returns: a parked
	// worker is only woken by another's task.
	Hold func(w int, now time.Duration) bool
	// Done is called once per task, in simulated-time order of task ends; an
	// error from Done stops the run and Run returns it (the study persists here).
	Done func(r TaskResult) error
	// Fault, if set, is asked once per task whether to inject a fault.
	Fault func(w int, t Task) *Fault
	// Timeline, if set, receives the GPU's total used bytes after each event (for plots); optional.
	Timeline func(now time.Duration, used uint64)
	// Compute is the contention model; the zero value time-slices.
	Compute Compute
}

// TaskResult is what one task did.
type TaskResult struct {
	Task                        Task
	Worker                      int
	Outcome                     Outcome
	Err                         string        // the OOM or device error message
	Start, End                  time.Duration // simulated clock
	Events                      int64
	PeakAllocated, PeakReserved uint64 // this worker's allocator during the task
	ReservedUnallocated         uint64 // reserved - allocated right after the trial's end (before the between-trial policy)
	Retries, OOMs               int64
	DeviceTime                  time.Duration // modelled device-call time during the task
	// Process counts the worker's processes: 1 for its first, 2 after its
	// first reset or restart, ...
	Process int

	// UnallocatedAtOOM is reserved - allocated of the worker's allocator at
	// the trial's OOM (0 without one): the "X is reserved by PyTorch but
	// unallocated" of the OOM message, the BERT-family study's 1.41 GiB.
	UnallocatedAtOOM uint64
}

// Summary is what a run did.
type Summary struct {
	Tasks, Completed, PrunedOOM, Failed int
	PeakDeviceUsed                      uint64        // peak of the GPU's used bytes (all processes, contexts included)
	Capacity                            uint64        // the GPU's memory
	Makespan                            time.Duration // simulated time until the last worker stopped
	Restarts                            int           // fresh processes started after the first (resets + sticky restarts)
	GivenUp                             []int         // workers given up after MaxConsecutiveFailures
	Stopped                             bool          // StopOnOOM ended the run
	// PeakReserved is the peak of all workers' reserved bytes together
	// (segments and mapped pages, contexts excluded); PeakLive the peak of
	// the bytes their trials held (requested sizes), the physical lower
	// bound. 1 - PeakLive/PeakReserved is the run's waste.
	PeakReserved, PeakLive uint64
	// Events is the number of events applied, all workers together.
	Events int64
	// DeviceTime is the modelled device-call time of all workers, the
	// calls a process makes when it starts included (StartupCost covers
	// those on the clock).
	DeviceTime time.Duration
}

// Run runs the workers until every one has stopped (Next said no, or it
// stopped after a failure), StopOnOOM stopped the run, or Done returned an
// error. Errors are bad options, a task whose reader fails (bad input, named
// with the task), and Done's.
func Run(o Options) (Summary, error) {
	if err := o.check(); err != nil {
		return Summary{}, err
	}
	r, err := newRun(o)
	if err != nil {
		return Summary{}, err
	}
	defer r.closeAll()
	if err := r.loop(); err != nil {
		return r.sum, err
	}
	return r.sum, nil
}

func (o *Options) check() error {
	switch {
	case o.Workers < 1:
		return fmt.Errorf("workers: %d workers; need at least 1", o.Workers)
	case o.Next == nil:
		return fmt.Errorf("workers: Options.Next is nil")
	case o.Compute.Share < 0 || o.Compute.Share > 1 || o.Compute.Share != o.Compute.Share:
		return fmt.Errorf("workers: compute share %v is outside (0, 1]", o.Compute.Share)
	case o.Policy.OnOOM != "" && o.Policy.OnOOM != PruneOnOOM && o.Policy.OnOOM != StopOnOOM:
		return fmt.Errorf("workers: OOM policy %q; want %q or %q", o.Policy.OnOOM, PruneOnOOM, StopOnOOM)
	case o.Policy.ResetEvery < 0:
		return fmt.Errorf("workers: ResetEvery %d is negative", o.Policy.ResetEvery)
	case o.Policy.MaxConsecutiveFailures < 0:
		return fmt.Errorf("workers: MaxConsecutiveFailures %d is negative", o.Policy.MaxConsecutiveFailures)
	case o.Policy.Gap < 0 || o.Policy.StartupCost < 0:
		return fmt.Errorf("workers: negative Gap or StartupCost")
	}
	for i, s := range o.Stagger {
		if s < 0 {
			return fmt.Errorf("workers: Stagger[%d] = %v is negative", i, s)
		}
	}
	return nil
}

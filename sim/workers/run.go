package workers

import (
	"fmt"
	"time"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// run is one Run's state: the GPU, the clock and the workers.
type run struct {
	o       Options
	cfg     config.Config
	gpu     *gpu.GPU
	clock   scheduler
	workers []*worker
	sum     Summary
	stopped bool // StopOnOOM fired
	// used is the GPU's used bytes as of the last device call, kept so that
	// the Timeline and the peak need no lock per event.
	used uint64
	// procs counts live processes, whose contexts used includes; live
	// sums the bytes the workers' trials hold.
	procs int
	live  uint64
	// held lists the parked workers and active counts the workers neither
	// parked nor stopped, so that a task's end wakes the parked and a
	// worker asks whether others run without a scan of every worker
	// (which made a run quadratic in its workers).
	held   []int
	active int
}

func newRun(o Options) (*run, error) {
	card, err := gpu.New(o.GPU)
	if err != nil {
		return nil, err
	}
	r := &run{o: o, gpu: card}
	if o.Alloc != nil {
		r.cfg = *o.Alloc
	} else {
		r.cfg = config.Default()
	}
	if r.o.Policy.OnOOM == "" {
		r.o.Policy.OnOOM = PruneOnOOM
	}
	if r.o.Policy.MaxConsecutiveFailures == 0 {
		r.o.Policy.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	r.clock.share = o.Compute.Share
	if r.clock.share == 0 {
		r.clock.share = 1
	}
	r.sum.Capacity = card.Capacity()
	r.workers = make([]*worker, o.Workers)
	r.active = o.Workers
	for i := range r.workers {
		r.workers[i] = &worker{id: i, r: r}
		var at time.Duration
		if i < len(o.Stagger) {
			at = o.Stagger[i]
		}
		r.clock.waitFor(i, float64(at))
	}
	return r, nil
}

// loop applies every worker's steps in time order until none is left.
func (r *run) loop() error {
	for !r.stopped {
		w, ok := r.clock.next()
		if !ok {
			break
		}
		if err := r.workers[w].step(); err != nil {
			return err
		}
		if checkInvariants {
			r.checkParked()
		}
	}
	if r.stopped && r.nowD() > r.sum.Makespan {
		r.sum.Makespan = r.nowD()
	}
	r.sum.DeviceTime = r.gpu.Counters().Total.Time
	return nil
}

// nowD is the clock as a Duration.
func (r *run) nowD() time.Duration { return time.Duration(r.clock.now) }

// observe notes the GPU's use after a step that may have changed it.
func (r *run) observe() {
	r.used = r.gpu.Used()
	if r.used > r.sum.PeakDeviceUsed {
		r.sum.PeakDeviceUsed = r.used
	}
	if res := r.used - uint64(r.procs)*r.gpu.ContextOverhead(); res > r.sum.PeakReserved {
		r.sum.PeakReserved = res
	}
}

// closeAll ends what is still running (the run stopped early or failed):
// readers are closed and processes exit. The workers' live tables go to
// the next run.
func (r *run) closeAll() {
	for _, w := range r.workers {
		w.closeReader()
		w.exit()
		w.live.release()
	}
}

// othersActive reports whether a worker other than w is neither parked nor
// stopped: one that will end a task, or ask for one, and so wake the parked.
func (r *run) othersActive(w int) bool {
	n := r.active
	if me := r.workers[w]; !me.held && me.phase != phaseDone {
		n--
	}
	return n > 0
}

// checkInvariants turns on checkParked after every step; the package's
// tests switch it on (invariants_test.go).
var checkInvariants = false

// checkParked panics when held and active disagree with the workers'
// own flags.
func (r *run) checkParked() {
	active, held := 0, 0
	for _, w := range r.workers {
		switch {
		case w.held:
			held++
		case w.phase != phaseDone:
			active++
		}
	}
	if active != r.active || held != len(r.held) {
		panic(fmt.Sprintf("workers: %d active and %d parked, the run counts %d and %d", active, held, r.active, len(r.held)))
	}
}

// park takes w off the clock until wakeHeld.
func (r *run) park(w *worker) {
	w.held = true
	r.active--
	r.held = append(r.held, w.id)
}

// wakeHeld puts every parked worker back on the clock, now, in worker
// order (the clock's tie rule), to ask Options.Hold again.
func (r *run) wakeHeld() {
	// Pushed in any order: the clock breaks equal times by worker index.
	for _, id := range r.held {
		r.workers[id].held = false
		r.active++
		r.clock.waitFor(id, 0)
	}
	r.held = r.held[:0]
}

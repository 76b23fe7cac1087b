package workers

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/trace"
)

// phase is what a worker's next step does.
type phase uint8

const (
	phaseStart  phase = iota // take the next task
	phaseEvent               // apply the buffered event
	phaseResume              // a device call's wait is over: compute towards the buffered event
	phaseEnd                 // the task is over: report it, then the between-trial policy
	phaseDone                // stopped
)

// worker is one HPO worker process and the task it runs.
type worker struct {
	id    int
	r     *run
	phase phase

	proc      *gpu.Process
	m         *meter
	a         *allocator.Allocator
	processes int // processes started so far
	callsSeen uint64
	timeSeen  time.Duration // the process's modelled call time at callsSeen

	// The task in progress.
	task Task
	rd   trace.Reader
	ev   trace.Event // the next event, read ahead (from rd.Next)
	// A reader that hands out its events in batches (sim/trial's) is read
	// in place: batch[bi] is the next event, and no call or copy is made
	// per event (4% of the trial model's time). bat is rd then, nil
	// otherwise; see next and cur.
	bat     batchReader
	batch   []trace.Event
	bi      int
	base    int64   // TimeUS of the task's first event
	last    int64   // rebased TimeUS of the last event applied
	pending float64 // compute (ns) to the buffered event, while waiting
	live    liveTable
	// liveBytes is what the task holds (requested sizes; blocks freed
	// but waiting for their streams no longer count).
	liveBytes uint64
	fault     *Fault
	res       TaskResult
	stats0    allocator.Stats // at the task's start, for deltas

	trialsInProc int // trials run by the current process
	consecFail   int
	held         bool // parked by Options.Hold, off the clock until woken
}

// step runs the worker's next step at the clock's now.
func (w *worker) step() error {
	switch w.phase {
	case phaseStart:
		return w.start()
	case phaseEvent:
		return w.event()
	case phaseResume:
		w.phase = phaseEvent
		w.r.clock.computeFor(w.id, w.pending)
		return nil
	case phaseEnd:
		return w.end()
	}
	return nil
}

// delay returns the modelled device-call time since the last call of delay.
// Small enough to inline: most events make no device call.
func (w *worker) delay() time.Duration {
	if w.m == nil || w.m.calls == w.callsSeen {
		return 0
	}
	return w.delaySince()
}

func (w *worker) delaySince() time.Duration {
	w.callsSeen = w.m.calls
	t := w.proc.Total().Time
	d := t - w.timeSeen
	w.timeSeen = t
	w.r.observe()
	return d
}

// start takes the next task and begins it.
func (w *worker) start() error {
	r := w.r
	now := r.nowD()
	if r.o.Hold != nil && r.o.Hold(w.id, now) {
		if !r.othersActive(w.id) {
			return fmt.Errorf("workers: Hold parked worker %d at %v while no other worker runs or can start a task: nothing would wake it", w.id, now)
		}
		r.park(w)
		return nil
	}
	t, ok := r.o.Next(w.id, now)
	if !ok {
		w.stop()
		return nil
	}
	w.task = t
	w.res = TaskResult{Task: t, Worker: w.id, Start: now, Outcome: Completed}
	w.fault = nil
	if r.o.Fault != nil {
		w.fault = r.o.Fault(w.id, t)
	}
	if w.proc == nil {
		if err := w.spawn(); err != nil {
			if !errors.Is(err, allocator.ErrDeviceOutOfMemory) {
				return err
			}
			// CUDA initialisation fails when the context does not fit.
			w.res.Outcome = Failed
			w.res.Err = err.Error()
			w.phase = phaseEnd
			r.clock.waitFor(w.id, 0)
			return nil
		}
	}
	w.res.Process = w.processes
	if t.Open == nil {
		return fmt.Errorf("workers: task %d (%s): no Open", t.ID, t.Label)
	}
	rd, err := t.Open()
	if err != nil {
		return fmt.Errorf("workers: task %d (%s): %w", t.ID, t.Label, err)
	}
	w.rd = rd
	w.bat, _ = rd.(batchReader)
	w.batch, w.bi = nil, 0
	w.a.ResetPeakStats()
	w.stats0 = w.a.Stats()
	w.timeSeen = w.proc.Total().Time
	w.callsSeen = w.m.calls
	if err := w.next(); err != nil {
		if err == io.EOF {
			w.finish(0)
			return nil
		}
		return w.badInput(0, err)
	}
	w.base, w.last = w.cur().TimeUS, 0
	w.phase = phaseEvent
	r.clock.computeFor(w.id, 0)
	return nil
}

// spawn starts a fresh process and allocator for the worker.
func (w *worker) spawn() error {
	p, err := w.r.gpu.NewProcess()
	if err != nil {
		return fmt.Errorf("worker %d: CUDA context: %w", w.id, err)
	}
	w.r.procs++
	w.r.observe()
	m := &meter{p: p}
	// The simulation runs every worker on one goroutine.
	opts := []allocator.Option{allocator.WithoutLocking()}
	if p := w.r.o.AllocPolicy; p != nil {
		opts = append(opts, allocator.WithPolicy(p))
	}
	a, err := allocator.New(m, w.r.cfg, opts...)
	if err != nil {
		p.Close()
		w.r.procs--
		w.r.observe()
		return fmt.Errorf("worker %d: allocator: %w", w.id, err)
	}
	if w.processes > 0 {
		w.r.sum.Restarts++
	}
	w.processes++
	w.proc, w.m, w.a = p, m, a
	w.callsSeen, w.timeSeen = 0, 0
	w.trialsInProc = 0
	return nil
}

// exit ends the worker's process (process exit frees all it held). The
// allocator is discarded once the live table has let go of its blocks: the
// next process's allocator takes their memory (two thirds of the bytes a
// trial-model run allocated, and so what paced the collector, were the
// Blocks of each run's fresh processes).
func (w *worker) exit() {
	if w.proc == nil {
		return
	}
	w.proc.Close()
	w.r.procs--
	w.r.observe()
	w.live.reset()
	w.a.Discard()
	if discarded != nil {
		discarded(w.a)
	}
	w.proc, w.m, w.a = nil, nil, nil
	w.r.live -= w.liveBytes
	w.liveBytes = 0
}

// discarded, when set (the tests: export_test.go), is shown each exited
// process's allocator.
var discarded func(*allocator.Allocator)

// batchReader is a reader that hands out its events in place, in slices
// valid until its next call (sim/trial's NextBatch).
type batchReader interface {
	NextBatch() ([]trace.Event, error)
}

// next reads the task's next event, which cur then returns.
func (w *worker) next() error {
	if w.bat == nil {
		return w.rd.Next(&w.ev)
	}
	if w.bi+1 < len(w.batch) {
		w.bi++
		return nil
	}
	b, err := w.bat.NextBatch()
	if err == nil && len(b) == 0 {
		err = errors.New("the reader's NextBatch returned no events")
	}
	if err != nil {
		w.batch, w.bi = nil, 0
		return err
	}
	w.batch, w.bi = b, 0
	return nil
}

// cur is the event next read: the reader's own, read in place, or the
// worker's copy.
func (w *worker) cur() *trace.Event {
	if w.batch != nil {
		return &w.batch[w.bi]
	}
	return &w.ev
}

// releaser is a reader that can hand its memory to the next one
// (sim/trial's): the worker reads only events, never the stack table, so it
// may release rather than close.
type releaser interface{ Release() }

func (w *worker) closeReader() {
	if w.rd != nil {
		if r, ok := w.rd.(releaser); ok {
			r.Release()
		} else {
			w.rd.Close()
		}
		w.rd = nil
	}
	w.bat, w.batch, w.bi = nil, nil, 0
}

// stop retires the worker.
func (w *worker) stop() {
	w.closeReader()
	w.exit()
	if w.phase != phaseDone && !w.held {
		w.r.active--
	}
	w.phase = phaseDone
	if now := w.r.nowD(); now > w.r.sum.Makespan {
		w.r.sum.Makespan = now
	}
	w.r.wakeHeld()
}

// badInput names the task and its event at index i.
func (w *worker) badInput(i int64, err error) error {
	return fmt.Errorf("workers: task %d (%s): event %d: %w", w.task.ID, w.task.Label, i, err)
}

// event applies the buffered event and reads the next, and goes on with
// the next while the clock would take this worker again at once (most
// events: the same op's, or a free's two, share a time): that skips a
// push and a pop of the clock's queues and a step's dispatch per event.
func (w *worker) event() error {
	r := w.r
	for {
		if f := w.fault; f != nil && f.AtEvent == w.res.Events {
			w.proc.InjectStickyError(f.Name)
			// The trainer's next CUDA call reports it.
			_, _, err := w.m.MemGetInfo()
			w.res.Outcome = Failed
			w.res.Err = err.Error()
			d := w.delay()
			w.res.DeviceTime += d
			w.finish(d)
			return nil
		}
		err := w.apply(w.cur())
		w.res.Events++
		r.sum.Events++
		d := w.delay()
		w.res.DeviceTime += d
		if r.o.Timeline != nil {
			r.o.Timeline(r.nowD(), r.used)
		}
		if err != nil {
			var oom *allocator.OutOfMemoryError
			switch {
			case errors.As(err, &oom):
				w.res.Outcome = PrunedOOM
				w.res.UnallocatedAtOOM = oom.Reserved - oom.Allocated
			case errors.Is(err, allocator.ErrFatal):
				w.res.Outcome = Failed
			default:
				return w.badInput(w.res.Events-1, err)
			}
			w.res.Err = err.Error()
			w.finish(d)
			return nil
		}
		if w.bi+1 < len(w.batch) {
			w.bi++ // next's own first case, without the call
		} else if err := w.next(); err != nil {
			if err == io.EOF {
				w.finish(d)
				return nil
			}
			return w.badInput(w.res.Events, err)
		}
		t := w.cur().TimeUS - w.base
		compute := float64(0)
		if t > w.last {
			// Times that go backwards (merged streams, clock steps) cost
			// nothing rather than a negative compute.
			compute = float64(t-w.last) * float64(time.Microsecond)
			w.last = t
		}
		if d > 0 {
			w.pending = compute
			w.phase = phaseResume
			r.clock.waitFor(w.id, float64(d))
			return nil
		}
		if !r.clock.again(w.id, compute) {
			r.clock.computeFor(w.id, compute)
			return nil
		}
		// This worker's next step, as the run's loop would have taken it.
		if checkInvariants {
			r.checkParked()
		}
	}
}

// finish ends the task's events; its end step comes after d of device time.
func (w *worker) finish(d time.Duration) {
	w.closeReader()
	w.phase = phaseEnd
	w.r.clock.waitFor(w.id, float64(d))
}

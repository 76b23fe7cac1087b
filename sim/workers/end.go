package workers

import (
	"errors"
	"fmt"

	"github.com/memreplay/memreplay/allocator"
)

// end reports the finished task and applies the between-trial policy.
func (w *worker) end() error {
	r := w.r
	res := &w.res
	res.End = r.nowD()
	if w.a != nil {
		if res.Outcome != Failed {
			// What the trial still holds dies with it (a PyTorch
			// program's tensors when the trial returns or unwinds).
			if err := w.releaseAll(); err != nil {
				if !errors.Is(err, allocator.ErrFatal) {
					return w.badInput(w.res.Events, err)
				}
				res.Outcome, res.Err = Failed, err.Error()
			}
		}
		w.live.reset()
		st := w.a.Stats()
		res.PeakAllocated = uint64(st.AllocatedBytes[0].Peak)
		res.PeakReserved = uint64(st.ReservedBytes[0].Peak)
		res.ReservedUnallocated = uint64(st.ReservedBytes[0].Current - st.AllocatedBytes[0].Current)
		res.Retries = st.NumAllocRetries - w.stats0.NumAllocRetries
		res.OOMs = st.NumOOMs - w.stats0.NumOOMs
	}
	d := w.delay()
	res.DeviceTime += d
	r.sum.Tasks++
	switch res.Outcome {
	case Completed:
		r.sum.Completed++
	case PrunedOOM:
		r.sum.PrunedOOM++
	case Failed:
		r.sum.Failed++
	}
	if r.o.Done != nil {
		if err := r.o.Done(*res); err != nil {
			return err
		}
	}
	if res.Outcome == PrunedOOM && r.o.Policy.OnOOM == StopOnOOM {
		r.stopped = true
		r.sum.Stopped = true
		return nil
	}
	p := &r.o.Policy
	if res.Outcome == Failed {
		w.consecFail++
		if w.consecFail >= p.MaxConsecutiveFailures {
			r.sum.GivenUp = append(r.sum.GivenUp, w.id)
			w.stop()
			return nil
		}
		if !p.RestartOnStickyError {
			w.stop()
			return nil
		}
		w.exit() // the supervisor starts a fresh process for the next task
	} else {
		w.consecFail = 0
		w.trialsInProc++
		if err := w.between(); err != nil {
			return fmt.Errorf("workers: worker %d after task %d (%s): %w", w.id, res.Task.ID, res.Task.Label, err)
		}
	}
	d += w.delay()
	wait := d + p.Gap
	if w.proc == nil && w.processes > 0 {
		wait += p.StartupCost
	}
	w.phase = phaseStart
	r.clock.waitFor(w.id, float64(wait))
	// What the task held is back (its blocks, and its process when the
	// policy ended it): parked workers ask again.
	r.wakeHeld()
	return nil
}

// between applies the policy after a trial that left the process healthy.
func (w *worker) between() error {
	p := &w.r.o.Policy
	switch {
	case p.ResetEvery > 0 && w.trialsInProc >= p.ResetEvery && !p.ResetByClear:
		w.exit()
	case p.ResetEvery > 0 && w.trialsInProc >= p.ResetEvery, p.DoubleClear:
		if p.ResetEvery > 0 && w.trialsInProc >= p.ResetEvery {
			w.trialsInProc = 0 // the count starts again after each reset
		}
		// empty_cache; torch.cuda.synchronize(); gc.collect(); empty_cache.
		// The synchronisation lets blocks that waited on other streams
		// back into their pools, so the second empty_cache can release
		// what the first could not.
		if err := w.a.EmptyCache(); err != nil {
			return err
		}
		w.proc.CompleteAllEvents()
		if err := w.a.ProcessEvents(); err != nil {
			return err
		}
		return w.a.EmptyCache()
	case p.EmptyCacheBetweenTrials:
		return w.a.EmptyCache()
	}
	return nil
}

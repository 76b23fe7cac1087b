package par

import (
	"time"

	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/packing"
	"github.com/memreplay/memreplay/sim/workers"
)

// runPacked runs the counted trials of mx (all K workers' of the draw)
// through sim/packing instead of fixed workers: a trial starts when its
// predicted peak reserved fits in what the running ones leave. The
// prediction is the trial's own solo run under this setting (its peak
// reserved alone), so what the packed row shows is the schedule's doing,
// not a predictor's error; a trial that does not fit alone is rejected
// before it runs and counts as too big, as in the fixed rows. At most K
// trials run at once (K processes, as PAR K has).
//
// Throughput is measured while trials were waiting: from the start to the
// moment the last trial was admitted (after it the queue is empty and the
// GPU drains, the ragged end the fixed rows leave out with fillers), each
// completed trial counting for the fraction of its run time in that
// window. When every trial was admitted at once there is no such window,
// and the rate is the completed trials over the makespan.
func runPacked(o *Options, s *Setting, mx mix, solo func(w, i int) solo) (MixStats, error) {
	k, T := len(mx.trials), o.TrialsPerWorker
	var order []packing.Item
	peaks := map[int]uint64{}
	for i := 0; i < T; i++ {
		for w := 0; w < k; w++ {
			t := mx.trials[w][i]
			id := w*T + i + 1
			sl := solo(w, i)
			peaks[id] = sl.peak
			if !sl.fits {
				peaks[id] = o.Capacity // rejected: cannot fit alone
			}
			order = append(order, packing.Item{ID: id, Label: t.Label, Open: t.Open, Predicted: peaks[id]})
		}
	}
	var res MixStats
	pos := 0
	sched, err := packing.New(packing.Options{
		Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, PriorRatio: 1,
		Source: func() (packing.Item, bool) {
			if pos == len(order) {
				return packing.Item{}, false
			}
			pos++
			return order[pos-1], true
		},
		Reject: func(packing.Item, uint64, time.Duration) error {
			res.Tasks++
			res.Pruned++
			res.TooBig++
			return nil
		},
	})
	if err != nil {
		return res, err
	}
	type span struct{ start, end time.Duration }
	var completions []span
	var lastStart, device, busy time.Duration
	cfg := s.Config
	pol := packing.Policy(o.Policy)
	pol.OnOOM = workers.PruneOnOOM
	pol.RestartOnStickyError = true
	sum, err := workers.Run(workers.Options{
		GPU:         gpu.Options{Name: "par", Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, Costs: o.Costs},
		Alloc:       &cfg,
		AllocPolicy: s.Policy,
		Workers:     k,
		Policy:      pol,
		Compute:     workers.Compute{Share: o.Share},
		Hold:        sched.Hold,
		Next: func(w int, now time.Duration) (workers.Task, bool) {
			t, ok := sched.Next(w, now)
			if ok {
				lastStart = max(lastStart, now)
			}
			return t, ok
		},
		Done: func(r workers.TaskResult) error {
			sched.Done(r)
			res.Tasks++
			device += r.DeviceTime
			busy += r.End - r.Start
			switch r.Outcome {
			case workers.Completed:
				res.Completed++
				completions = append(completions, span{r.Start, r.End})
			case workers.PrunedOOM:
				res.Pruned++
				res.OOM = true // it fits alone: the rejected ones never ran
			default:
				res.Failed++
				res.OOM = true
			}
			res.addTask(r)
			return sched.Err()
		},
	})
	if err != nil {
		return res, err
	}
	res.setSummary(sum)
	if lastStart > 0 {
		n := 0.0
		for _, c := range completions {
			if in := min(c.end, lastStart) - c.start; in > 0 {
				n += float64(in) / float64(c.end-c.start)
			}
		}
		res.Rate = n / lastStart.Seconds()
	} else if sum.Makespan > 0 {
		res.Rate = float64(res.Completed) / sum.Makespan.Seconds()
	}
	if busy > 0 {
		res.DeviceShare = float64(device) / float64(busy)
	}
	return res, nil
}

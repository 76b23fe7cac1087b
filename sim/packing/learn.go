package packing

import "github.com/memreplay/memreplay/sim/workers"

// learner keeps what the finished trials said about the predictions: per
// model the largest peak reserved / prediction, and the safety margin,
// widened by every OOM and every trial that needed a retry.
type learner struct {
	byModel map[string]float64
	all     float64 // largest ratio of any model; 0: nothing learned yet
	margin  float64
}

func newLearner(margin, prior float64) learner {
	return learner{byModel: map[string]float64{}, margin: margin, all: max(prior, 0)}
}

// ratio is the correction for a model: its own if seen, else the largest of
// all; known is false before any trial has finished.
func (l *learner) ratio(model string) (r float64, known bool) {
	if r, ok := l.byModel[model]; ok {
		return r, true
	}
	return l.all, l.all > 0
}

func (l *learner) observe(model string, pred uint64, r workers.TaskResult, oomStep, retryStep float64) {
	if r.OOMs > 0 || r.Outcome == workers.PrunedOOM {
		l.margin += oomStep
	} else if r.Retries > 0 {
		l.margin += retryStep
	}
	// A failed trial (a sticky error) ended anywhere: its peak says
	// nothing about its need. A pruned one reserved at least this much,
	// a lower bound worth keeping.
	if r.Outcome == workers.Failed || pred == 0 || r.PeakReserved == 0 {
		return
	}
	x := float64(r.PeakReserved) / float64(pred)
	if x > l.byModel[model] {
		l.byModel[model] = x
	}
	if x > l.all {
		l.all = x
	}
}

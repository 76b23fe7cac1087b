package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// specTask runs sim/trial's model of a fine-tuning trial.
func specTask(id int, s trial.Spec) workers.Task {
	return workers.Task{ID: id, Label: s.String(), Open: func() (trace.Reader, error) { return s.Reader() }}
}

func TestTrialModelReaders(t *testing.T) {
	base, err := trial.LookupModel("bert-base")
	require.NoError(t, err)
	specs := []trial.Spec{
		{Model: base, Batch: 8, SeqLen: 128, Steps: 2, Seed: 1},
		{Model: base, Batch: 16, SeqLen: 256, Steps: 2, Precision: trial.FP16, Seed: 2},
	}
	for _, conf := range []string{"", "expandable_segments:True"} {
		cfg, err := config.Parse(conf)
		require.NoError(t, err)
		var rs []workers.TaskResult
		next := 0
		sum, err := workers.Run(workers.Options{
			GPU: gpu.Options{Capacity: 24 * giB}, Alloc: &cfg, Workers: 2,
			Stagger: []time.Duration{0, 100 * time.Millisecond},
			Compute: workers.Compute{Share: 0.5},
			Next: func(w int, now time.Duration) (workers.Task, bool) {
				if next >= 2*len(specs) {
					return workers.Task{}, false
				}
				next++
				return specTask(next, specs[next%len(specs)]), true
			},
			Done: collect(&rs),
		})
		require.NoError(t, err, conf)
		assert.Equal(t, 4, sum.Completed, conf)
		for _, r := range rs {
			s := specs[r.Task.ID%len(specs)]
			// Alone, a trial's span is its modelled duration plus its
			// device calls; contention can only stretch it.
			assert.GreaterOrEqual(t, r.End-r.Start, s.Duration(), "%s %s", conf, r.Task.Label)
			assert.Positive(t, r.PeakAllocated)
			assert.GreaterOrEqual(t, r.PeakReserved, r.PeakAllocated)
		}
		assert.LessOrEqual(t, sum.PeakLive, sum.PeakReserved)
		assert.Less(t, sum.PeakReserved, sum.PeakDeviceUsed, "two contexts on top")
	}
}

// oneByOne hides the trial reader's NextBatch (and Release): the worker
// reads it event by event, as any other reader.
type oneByOne struct{ trace.Reader }

// TestBatchReadingIsEventByEventReading runs the same trial-model sweep with
// the workers reading sim/trial's readers in place (NextBatch) and event by
// event (Next), on a GPU that holds them all and on one that prunes some by
// OOM, with a sticky error injected mid-trial, and wants the same summary
// and task results: a batch read that skipped, repeated or misread an
// event would change the events counted, the peaks or the outcomes.
func TestBatchReadingIsEventByEventReading(t *testing.T) {
	specs := []trial.Spec{}
	for i, name := range []string{"bert-base", "roberta-base"} {
		m, err := trial.LookupModel(name)
		require.NoError(t, err)
		specs = append(specs, trial.Spec{Model: m, Batch: 8 + 8*i, SeqLen: 128, Steps: 2, Precision: trial.FP16, Seed: uint64(i)})
	}
	run := func(capacity uint64, wrap bool) (workers.Summary, []workers.TaskResult) {
		var rs []workers.TaskResult
		n := 0
		sum, err := workers.Run(workers.Options{
			GPU: gpu.Options{Capacity: capacity}, Workers: 3,
			Stagger: []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond},
			Compute: workers.Compute{Share: 0.5},
			Next: func(w int, now time.Duration) (workers.Task, bool) {
				if n >= 6 {
					return workers.Task{}, false
				}
				n++
				task := specTask(n, specs[n%len(specs)])
				if wrap {
					open := task.Open
					task.Open = func() (trace.Reader, error) {
						rd, err := open()
						return oneByOne{rd}, err
					}
				}
				return task, true
			},
			Fault: func(w int, task workers.Task) *workers.Fault {
				if task.ID == 4 {
					return &workers.Fault{AtEvent: 3001, Name: "cudaErrorIllegalAddress"}
				}
				return nil
			},
			Done: collect(&rs),
		})
		require.NoError(t, err)
		for i := range rs {
			rs[i].Task.Open = nil // a function: the results are compared by all else
		}
		return sum, rs
	}
	for _, capacity := range []uint64{24 * giB, 5 * giB} {
		wantSum, want := run(capacity, true)
		gotSum, got := run(capacity, false)
		require.Equal(t, wantSum, gotSum, "capacity %d", capacity)
		require.Equal(t, want, got, "capacity %d", capacity)
		if capacity < 24*giB {
			require.Positive(t, gotSum.PrunedOOM, "the small GPU prunes some")
		} else {
			require.Positive(t, gotSum.Failed, "the fault fails one")
		}
	}
}

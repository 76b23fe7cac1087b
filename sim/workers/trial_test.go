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

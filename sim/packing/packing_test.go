package packing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/packing"
	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/sim/workers"
)

const giB = uint64(1) << 30

// items are trials whose predictions a table gives, by model name.
func items(names ...string) func() (packing.Item, bool) {
	i := 0
	return func() (packing.Item, bool) {
		if i == len(names) {
			return packing.Item{}, false
		}
		i++
		return packing.Item{ID: i, Label: names[i-1], Spec: trial.Spec{Model: trial.Model{Name: names[i-1]}}}, true
	}
}

func table(sizes map[string]uint64) packing.Predictor {
	return func(s trial.Spec) uint64 { return sizes[s.Model.Name] }
}

// finish reports trial id as completed with the peak it was predicted.
func finish(s *packing.Scheduler, id int, peak uint64) {
	s.Done(workers.TaskResult{Task: workers.Task{ID: id}, Outcome: workers.Completed, PeakReserved: peak})
}

func TestSmallTrialsGoPastABigOneThatWaits(t *testing.T) {
	sizes := map[string]uint64{"big": 6 * giB, "big2": 6 * giB, "small": 2 * giB, "small2": 2 * giB}
	var adm []packing.Admission
	s, err := packing.New(packing.Options{
		Capacity: 10 * giB, ContextOverhead: giB / 2, Predict: table(sizes),
		PriorRatio: 1, Margin: -1, // exact predictions, no margin: round figures
		Source:   items("big", "big2", "small", "small2"),
		Admitted: func(a packing.Admission) { adm = append(adm, a) },
	})
	require.NoError(t, err)
	require.False(t, s.Hold(0, 0))
	t0, ok := s.Next(0, 0)
	require.True(t, ok)
	assert.Equal(t, "big", t0.Label)
	// big2 (6.5 GiB) does not fit in the 3.5 left; small (2.5) does.
	require.False(t, s.Hold(1, 0))
	t1, _ := s.Next(1, 0)
	assert.Equal(t, "small", t1.Label)
	// 1 GiB left: small2 (2.5) waits too.
	assert.True(t, s.Hold(2, 0), "nothing fits: the worker is parked")
	_, ok = s.Next(2, 0)
	assert.False(t, ok, "a parked worker was admitted nothing")
	finish(s, t0.ID, 6*giB)
	// big's 6.5 GiB are back: big2, the oldest, comes first.
	require.False(t, s.Hold(2, time.Second))
	t2, _ := s.Next(2, time.Second)
	assert.Equal(t, "big2", t2.Label)
	require.Len(t, adm, 3)
	assert.Equal(t, []uint64{13 * giB / 2, 9 * giB, 9 * giB}, []uint64{adm[0].Committed, adm[1].Committed, adm[2].Committed})
	assert.Equal(t, 1, adm[1].Passed, "small went past big2")
}

func TestTheOldestIsPassedOverAtMostMaxPassTimes(t *testing.T) {
	sizes := map[string]uint64{"a": 6 * giB, "big": 6 * giB, "s1": giB, "s2": giB}
	s, err := packing.New(packing.Options{
		Capacity: 10 * giB, ContextOverhead: giB / 2, Predict: table(sizes),
		PriorRatio: 1, Margin: -1, MaxPass: 1,
		Source: items("a", "big", "s1", "s2"),
	})
	require.NoError(t, err)
	require.False(t, s.Hold(0, 0))
	s.Next(0, 0)
	require.False(t, s.Hold(1, 0))
	t1, _ := s.Next(1, 0)
	assert.Equal(t, "s1", t1.Label, "s1 goes past big once")
	assert.True(t, s.Hold(2, 0), "s2 would fit (1.5 of 2 GiB left) but big has been passed over enough")
}

func TestATrialThatCannotFitAloneIsRejected(t *testing.T) {
	sizes := map[string]uint64{"huge": 30 * giB, "ok": giB}
	var rejected []int
	s, err := packing.New(packing.Options{
		Capacity: 24 * giB, Predict: table(sizes), PriorRatio: 1,
		Source: items("huge", "ok"),
		Reject: func(it packing.Item, need uint64, _ time.Duration) error {
			rejected = append(rejected, it.ID)
			assert.Greater(t, need, 24*giB)
			return nil
		},
	})
	require.NoError(t, err)
	require.False(t, s.Hold(0, 0))
	t0, _ := s.Next(0, 0)
	assert.Equal(t, "ok", t0.Label)
	assert.Equal(t, []int{1}, rejected)
}

func TestBeforeAnythingIsLearnedATrialRunsAlone(t *testing.T) {
	sizes := map[string]uint64{"m": giB, "n": giB}
	var adm []packing.Admission
	s, err := packing.New(packing.Options{
		Capacity: 24 * giB, Predict: table(sizes), // no prior: probes
		Source:   items("m", "m", "n"),
		Admitted: func(a packing.Admission) { adm = append(adm, a) },
	})
	require.NoError(t, err)
	require.False(t, s.Hold(0, 0))
	t0, _ := s.Next(0, 0)
	assert.True(t, s.Hold(1, 0), "the probe has the GPU to itself")
	finish(s, t0.ID, 3*giB/2) // reserved 1.5 x its prediction
	require.False(t, s.Hold(1, time.Second))
	s.Next(1, time.Second)
	require.False(t, s.Hold(2, time.Second), "n, unseen, is admitted with the largest ratio learned")
	require.Len(t, adm, 3)
	assert.True(t, adm[0].Alone)
	ctx := uint64(500) << 20
	ratio := 1.5
	want := uint64(float64(giB)*ratio*(1+packing.DefaultMargin)) + ctx
	assert.Equal(t, want, adm[1].Need)
	assert.Equal(t, want, adm[2].Need)
}

func TestOOMsAndRetriesWidenTheMargin(t *testing.T) {
	s, err := packing.New(packing.Options{Capacity: 24 * giB, Predict: table(map[string]uint64{"m": giB}),
		PriorRatio: 1, Source: items("m", "m", "m")})
	require.NoError(t, err)
	assert.InDelta(t, packing.DefaultMargin, s.Margin(), 1e-12)
	var ids []int
	for w := range 3 {
		require.False(t, s.Hold(w, 0))
		tk, _ := s.Next(w, 0)
		ids = append(ids, tk.ID)
	}
	// A result of a trial the scheduler did not admit is ignored.
	s.Done(workers.TaskResult{Task: workers.Task{ID: 99}, Outcome: workers.PrunedOOM, OOMs: 1})
	assert.InDelta(t, packing.DefaultMargin, s.Margin(), 1e-12)
	s.Done(workers.TaskResult{Task: workers.Task{ID: ids[0]}, Outcome: workers.PrunedOOM, OOMs: 1, PeakReserved: giB / 2})
	assert.InDelta(t, packing.DefaultMargin+packing.DefaultOOMStep, s.Margin(), 1e-12)
	s.Done(workers.TaskResult{Task: workers.Task{ID: ids[1]}, Outcome: workers.Completed, Retries: 2, PeakReserved: giB})
	assert.InDelta(t, packing.DefaultMargin+packing.DefaultOOMStep+packing.DefaultRetryStep, s.Margin(), 1e-12)
	s.Done(workers.TaskResult{Task: workers.Task{ID: ids[2]}, Outcome: workers.Completed, PeakReserved: giB})
	assert.InDelta(t, packing.DefaultMargin+packing.DefaultOOMStep+packing.DefaultRetryStep, s.Margin(), 1e-12,
		"a clean trial changes nothing")
}

package study

import (
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/gpu"
)

func packedOptions(trials int) Options {
	o := baseOptions(trials)
	o.Schedule, o.Workers, o.Capacity, o.ComputeShare = PackedSchedule, DefaultPackedMax, 24125<<20, 0.5
	return o
}

// The packed study on the BERT-family space: no trial runs out of memory,
// the trials that ran at the same time never held more than the card (each
// one's peak reserved and context, summed over every moment a trial
// started), some ran side by side, only trials alone had to retry, and
// what cannot fit alone was pruned before it ran.
func TestPackedStudyIsOOMFreeAndShares(t *testing.T) {
	o := packedOptions(trialsN(60))
	res, rep := run(t, o)
	assert.Zero(t, rep.PrunedOOM)
	assert.Zero(t, rep.OOMs)
	assert.Equal(t, o.Trials, rep.Completed+rep.PrunedEstimate)
	recs := res.State.Records
	most := 0
	for _, r := range recs {
		if r.Outcome == PrunedEstimate {
			assert.Contains(t, r.Error, "cannot fit even alone")
			continue
		}
		var sum uint64
		n := 0
		for _, q := range recs {
			if q.Outcome != PrunedEstimate && q.StartUS <= r.StartUS && q.EndUS > r.StartUS {
				sum += q.PeakReserved + gpu.DefaultContextOverhead
				n++
			}
		}
		assert.LessOrEqual(t, sum, o.Capacity, "at trial %d's start", r.ID)
		most = max(most, n)
		if r.Retries > 0 {
			// Only a trial that needs the whole card (it fits alone by
			// releasing its cache) may see a cudaMalloc fail.
			for _, q := range recs {
				if q.ID != r.ID && q.Outcome != PrunedEstimate && q.StartUS < r.EndUS && q.EndUS > r.StartUS {
					t.Errorf("trial %d retried while trial %d ran beside it", r.ID, q.ID)
				}
			}
		}
	}
	assert.GreaterOrEqual(t, most, 2, "small trials shared the GPU")
	assert.Contains(t, rep.Label, "packed (replay prediction, at most 8 at once)")
}

// A packed study resumes like a fixed one, and its header says it was
// packed: a fixed run cannot resume it.
func TestPackedStudyStateAndResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	o := packedOptions(12)
	o.State = path
	_, err := Run(o)
	require.NoError(t, err)
	st, err := LoadState(path)
	require.NoError(t, err)
	assert.Equal(t, PackedSchedule, st.Header.Options.Schedule)
	assert.Equal(t, ReplayPredictor, st.Header.Options.Predict)

	fixed := o
	fixed.Schedule, fixed.Resume, fixed.Trials = "", true, 16
	_, err = Run(fixed)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schedule")

	more := o
	more.Resume, more.Trials = true, 16
	res, err := Run(more)
	require.NoError(t, err)
	var ids []int
	for _, r := range res.State.Records {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, ids)
}

func TestCompareSchedulesRunsTheSameTrials(t *testing.T) {
	o := packedOptions(trialsN(20))
	reps, err := CompareSchedules(o, 2)
	require.NoError(t, err)
	require.Len(t, reps, 3)
	assert.Contains(t, reps[0].Label, "PAR 1")
	assert.Contains(t, reps[1].Label, "PAR 2")
	assert.Contains(t, reps[2].Label, "packed")
	for _, r := range reps {
		assert.Equal(t, o.Trials, r.Planned)
		assert.Equal(t, o.Trials, r.Finished)
	}
}

func TestPackedRefusesEstimatePrune(t *testing.T) {
	o := packedOptions(4)
	o.Policy.EstimatePrune = true
	_, err := Run(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exclude each other")
}

// The seeds' "GPU reset" (a clear in the same process) does not cure a
// context an OOM corrupted; a process restart does.
func TestResetByClearKeepsACorruptedContext(t *testing.T) {
	o := baseOptions(trialsN(40))
	o.Policy.OOMCorrupts, o.Policy.RestartOnError, o.Policy.ResetEvery = 1, true, 1
	_, restart := run(t, o)
	require.Positive(t, restart.PrunedOOM, "the setup must have OOMs")
	assert.Zero(t, restart.Failed, "a fresh process after every trial: no corruption survives")
	o.Policy.ResetKind = ResetClear
	_, clear := run(t, o)
	assert.Positive(t, clear.Failed, "the clear keeps the corrupted context")
	assert.Contains(t, clear.Label, "reset-every 1 (clear, same process)")
	assert.Equal(t, ResetClear, o.JSON().ResetKind)
}

// Under memreplay estimate's prediction (the figure python/memreplay's gate
// admits a trial by) the packed study predicts every trial as the whole
// trial run alone predicts it, so it stays OOM-free and still shares the
// card; estimate's few steps reach the whole trial's peaks.
func TestPackedStudyByEstimateIsOOMFreeAndShares(t *testing.T) {
	o := packedOptions(trialsN(60))
	o.Packing.Predict = EstimatePredictor
	res, rep := run(t, o)
	assert.Zero(t, rep.PrunedOOM)
	assert.Zero(t, rep.OOMs)
	assert.Equal(t, o.Trials, rep.Completed+rep.PrunedEstimate)
	assert.Contains(t, rep.Label, "estimate prediction")

	o.Packing.Predict = ReplayPredictor
	byReplay, _ := run(t, o)
	require.Equal(t, len(byReplay.State.Records), len(res.State.Records))
	for i, r := range res.State.Records {
		q := byReplay.State.Records[i]
		assert.Equal(t, q.Outcome, r.Outcome, "trial %d", r.ID)
		assert.Equal(t, q.StartUS, r.StartUS, "trial %d starts when the whole-trial prediction starts it", r.ID)
	}
}

// The schedules run at once; the answer must not depend on how many
// cores there are, nor differ from running each study alone.
func TestCompareSchedulesWhateverTheCores(t *testing.T) {
	o := packedOptions(trialsN(12))
	prev := runtime.GOMAXPROCS(1)
	one, err := CompareSchedules(o, 3)
	runtime.GOMAXPROCS(4)
	four, err4 := CompareSchedules(o, 3)
	runtime.GOMAXPROCS(prev)
	require.NoError(t, err)
	require.NoError(t, err4)
	assert.Equal(t, one, four)
	f := o
	f.Schedule, f.Workers, f.Packing = FixedSchedule, 2, Packing{}
	res, err := Run(f)
	require.NoError(t, err)
	assert.Equal(t, Summarize(res.State, res.Planned), four[1])
}

// The packed schedule's predictions are replayed ahead on other cores;
// the study must be the same as on one core.
func TestPackedPrefetchWhateverTheCores(t *testing.T) {
	o := packedOptions(trialsN(16))
	prev := runtime.GOMAXPROCS(1)
	one, err := Run(o)
	runtime.GOMAXPROCS(4)
	four, err4 := Run(o)
	runtime.GOMAXPROCS(prev)
	require.NoError(t, err)
	require.NoError(t, err4)
	assert.Equal(t, one.State.Records, four.State.Records)
	assert.Equal(t, one.Summary, four.Summary)
}

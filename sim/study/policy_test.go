package study

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Each of the seeds' policies, switched on alone against the same study
// (same seed, same trials), must change what it claims to change.

func meanRU(recs []Record) float64 {
	var s float64
	n := 0
	for _, r := range recs {
		if r.PeakReserved > 0 {
			s += float64(r.ReservedUnallocated)
			n++
		}
	}
	return s / float64(n)
}

func TestEmptyCacheLowersReservedUnallocated(t *testing.T) {
	o := baseOptions(trialsN(24))
	o.Workers = 1
	plain, _ := run(t, o)
	o.Policy.EmptyCache = true
	ec, _ := run(t, o)
	o.Policy.EmptyCache, o.Policy.DoubleClear = false, true
	dc, _ := run(t, o)
	// Without a clear a worker's cache keeps every earlier trial's
	// segments; with one it holds only the last trial's.
	require.Less(t, meanRU(ec.State.Records), 0.8*meanRU(plain.State.Records))
	require.LessOrEqual(t, meanRU(dc.State.Records), meanRU(ec.State.Records))
	t.Logf("mean reserved-unallocated after a trial: none %.2f GiB, empty_cache %.2f GiB, double clear %.2f GiB",
		meanRU(plain.State.Records)/(1<<30), meanRU(ec.State.Records)/(1<<30), meanRU(dc.State.Records)/(1<<30))
}

func TestEstimatePruneTradesOOMsForPrunedTrials(t *testing.T) {
	o := baseOptions(trialsN(40))
	_, plain := run(t, o)
	o.Policy.EstimatePrune = true
	res, est := run(t, o)
	require.Greater(t, plain.PrunedOOM, 0, "the seeds' PAR 4 setup runs out of memory")
	require.Greater(t, est.PrunedEstimate, 0)
	require.Less(t, est.PrunedOOM, plain.PrunedOOM)
	require.Equal(t, est.Planned, est.Finished)
	for _, r := range res.State.Records {
		if r.Outcome == PrunedEstimate {
			require.Equal(t, -1, r.Worker)
			require.Equal(t, r.StartUS, r.EndUS, "no worker time")
			require.Zero(t, r.Events)
			require.Contains(t, r.Error, "per worker")
		}
		require.NotZero(t, r.EstimateBytes)
	}
	t.Logf("OOMs %d -> %d, pruned by the estimate %d", plain.PrunedOOM, est.PrunedOOM, est.PrunedEstimate)
}

func TestStopOnOOM(t *testing.T) {
	o := baseOptions(trialsN(40))
	o.Policy.PruneOnOOM = false
	_, rep := run(t, o)
	require.True(t, rep.Stopped)
	require.Equal(t, 1, rep.PrunedOOM, "the study ends at its first OOM")
	require.Greater(t, rep.NotRun, 0)
}

func TestRestartOnErrorKeepsWorkersAlive(t *testing.T) {
	n := trialsN(30)
	o := baseOptions(n)
	o.Workers = 2
	o.Policy.FaultRate = 0.3
	_, plain := run(t, o)
	require.Greater(t, plain.Failed, 0)
	require.LessOrEqual(t, plain.Failed, 2, "without restarts each worker stops at its first failure")
	require.Greater(t, plain.NotRun, 0)

	// At 30% three failures in a row happen; this test is about the
	// restart, TestGiveUpAfterConsecutiveFailures about giving up.
	o.Policy.RestartOnError, o.Policy.MaxFailures = true, 10
	_, rs := run(t, o)
	require.Zero(t, rs.NotRun, "restarted workers run the whole study")
	require.Greater(t, rs.Failed, 2)
	// A fresh process after every failure but the last of each worker.
	require.GreaterOrEqual(t, rs.Restarts, rs.Failed-o.Workers)
	require.Zero(t, rs.GivenUp)
}

func TestGiveUpAfterConsecutiveFailures(t *testing.T) {
	o := baseOptions(20)
	o.Workers = 2
	o.Policy.FaultRate = 1
	o.Policy.RestartOnError = true
	_, rep := run(t, o)
	require.Equal(t, 6, rep.Failed, "3 failures in a row per worker")
	require.Equal(t, 2, rep.GivenUp)
	require.Equal(t, 14, rep.NotRun)

	o.Policy.MaxFailures = 1
	_, rep = run(t, o)
	require.Equal(t, 2, rep.Failed)
	require.Equal(t, 2, rep.GivenUp)
}

func TestOOMCorruptsTheNextTrial(t *testing.T) {
	o := baseOptions(trialsN(40))
	o.Policy.RestartOnError = true
	o.Policy.OOMCorrupts = 1
	res, rep := run(t, o)
	require.Greater(t, rep.PrunedOOM, 0)
	require.Greater(t, rep.Failed, 0)
	// Every failure is the next trial on a worker whose previous trial
	// ran out of memory.
	last := map[int]Record{}
	for _, r := range res.State.Records {
		if r.Outcome == Failed {
			require.Contains(t, r.Error, "oom-corrupts")
			require.Contains(t, r.Error, "cudaErrorAssert")
			prev, ok := last[r.Worker]
			require.True(t, ok)
			require.Equal(t, PrunedOOM, prev.Outcome, "trial %d failed after trial %d", r.ID, prev.ID)
		}
		last[r.Worker] = r
	}

	// A fresh process before every trial leaves no corrupted context.
	o.Policy.ResetEvery = 1
	_, rep = run(t, o)
	require.Greater(t, rep.PrunedOOM, 0)
	require.Zero(t, rep.Failed)

	// Draws are per trial: a rerun fails the same trials.
	o.Policy.ResetEvery = 0
	again, _ := run(t, o)
	require.Equal(t, res.State.Records, again.State.Records)
}

func TestResetEvery(t *testing.T) {
	o := baseOptions(10)
	o.Workers = 1
	o.Policy.ResetEvery = 3
	res, rep := run(t, o)
	require.Equal(t, 3, rep.Restarts, "fresh processes before trials 4, 7 and 10")
	for i, r := range res.State.Records {
		require.Equal(t, 1+i/3, r.Process, "trial %d", r.ID)
	}
}

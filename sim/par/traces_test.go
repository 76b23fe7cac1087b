package par_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/trace"
)

func events(t *testing.T, tr par.Trial) []trace.Event {
	t.Helper()
	r, err := tr.Open()
	require.NoError(t, err)
	var out []trace.Event
	for {
		var e trace.Event
		err := r.Next(&e)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, e)
	}
}

func TestFromTracesSplitsTrials(t *testing.T) {
	ev := func(a trace.Action, addr, size uint64, at int64, label string) trace.Event {
		return trace.Event{Action: a, Addr: addr, Size: size, TimeUS: at, Label: label}
	}
	tr := &trace.Trace{
		Header: trace.Header{Source: "memreplay", Devices: []trace.Device{{Index: 0}}},
		Stacks: trace.NewStacks(),
		Events: []trace.Event{
			ev(trace.ActionAlloc, 0x100, 4096, 10, ""), // held outside any trial: a dataset
			ev(trace.ActionTrialStart, 0, 0, 20, "lr=1e-4"),
			ev(trace.ActionAlloc, 0x200, 1<<20, 30, ""),
			ev(trace.ActionSegmentAlloc, 0x200, 2<<20, 30, ""), // a decision: dropped
			ev(trace.ActionFreeRequested, 0x100, 0, 35, ""),    // not the trial's: dropped
			ev(trace.ActionFreeRequested, 0x200, 0, 40, ""),
			ev(trace.ActionFreeCompleted, 0x200, 0, 40, ""),
			ev(trace.ActionTrialEnd, 0, 0, 50, "lr=1e-4"),
			ev(trace.ActionMarker, 0, 0, 55, "between"),
			ev(trace.ActionTrialStart, 0, 0, 60, "lr=3e-4"),
			ev(trace.ActionAlloc, 0x300, 3<<20, 70, ""),
			ev(trace.ActionTrialEnd, 0, 0, 90, "lr=3e-4"),
		},
	}
	path := filepath.Join(t.TempDir(), "study.mrt")
	require.NoError(t, trace.WriteFile(path, tr))
	trials, notes, err := par.FromTraces([]string{path})
	require.NoError(t, err)
	require.Len(t, trials, 2)
	assert.Equal(t, "study.mrt#1 lr=1e-4", trials[0].Label)
	assert.Equal(t, "study.mrt#2 lr=3e-4", trials[1].Label)
	assert.Equal(t, int64(30), trials[0].Duration.Microseconds())
	assert.Equal(t, int64(30), trials[1].Duration.Microseconds())
	var acts []trace.Action
	for _, e := range events(t, trials[0]) {
		acts = append(acts, e.Action)
	}
	assert.Equal(t, []trace.Action{trace.ActionTrialStart, trace.ActionAlloc, trace.ActionFreeRequested, trace.ActionFreeCompleted, trace.ActionTrialEnd}, acts)
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "1 frees of blocks allocated outside their trial were dropped")
}

func TestFromTracesWholeFileAndTimes(t *testing.T) {
	// No trial markers and no times: the whole file is one trial, with a
	// microsecond per event; a reused address whose free was lost is
	// freed before its reuse.
	tr := &trace.Trace{
		Header: trace.Header{Source: "memreplay"},
		Stacks: trace.NewStacks(),
		Events: []trace.Event{
			{Action: trace.ActionAlloc, Addr: 0x10, Size: 100},
			{Action: trace.ActionAlloc, Addr: 0x10, Size: 200},
			{Action: trace.ActionFreeRequested, Addr: 0x10},
		},
	}
	path := filepath.Join(t.TempDir(), "flat.mrt")
	require.NoError(t, trace.WriteFile(path, tr))
	trials, _, err := par.FromTraces([]string{path})
	require.NoError(t, err)
	require.Len(t, trials, 1)
	assert.Equal(t, "flat.mrt", trials[0].Label)
	evs := events(t, trials[0])
	require.Len(t, evs, 4)
	assert.Equal(t, trace.ActionFreeRequested, evs[1].Action)
	for i, e := range evs {
		assert.Equal(t, int64(i), e.TimeUS)
	}
}

func TestFromTracesPartialPyTorchSnapshot(t *testing.T) {
	path := "../../traces/pytorch/cs336_silmont2000_memory_forward_fp32_128.pickle"
	trials, notes, err := par.FromTraces([]string{path})
	require.NoError(t, err)
	require.Len(t, trials, 1)
	require.NotEmpty(t, notes)
	assert.Contains(t, notes[0], "137 blocks")
	evs := events(t, trials[0])
	allocs := 0
	for _, e := range evs[:137] {
		if e.Action == trace.ActionAlloc {
			allocs++
		}
	}
	assert.Equal(t, 137, allocs, "the live blocks come first")
}

func TestFromTracesErrors(t *testing.T) {
	dir := t.TempDir()
	_, _, err := par.FromTraces([]string{filepath.Join(dir, "missing.mrt")})
	assert.Error(t, err)
	junk := filepath.Join(dir, "junk.bin")
	require.NoError(t, os.WriteFile(junk, []byte("garbage"), 0o644))
	_, _, err = par.FromTraces([]string{junk})
	assert.ErrorContains(t, err, "junk.bin")
	empty := filepath.Join(dir, "empty.mrt")
	require.NoError(t, trace.WriteFile(empty, &trace.Trace{Stacks: trace.NewStacks()}))
	_, _, err = par.FromTraces([]string{empty})
	assert.ErrorContains(t, err, "no allocation")
}

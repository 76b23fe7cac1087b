package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// A PyTorch snapshot converted to a pickle reads back with the same events
// and end state, and replays to the same decisions and statistics.
func TestConvertToPickle(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "fwd.pickle")
	code, stdout, stderr := runCLI("convert", partialTrace, out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "-> "+out+": PyTorch snapshot, 2043 trace entries, 2 external annotations, end state of 29 segments")
	require.NotContains(t, stdout, "left out")

	orig, err := trace.ReadPyTorchFile(partialTrace)
	require.NoError(t, err)
	back, err := trace.ReadPyTorchFile(out)
	require.NoError(t, err)
	require.Equal(t, len(orig.Events), len(back.Events))
	for i := range orig.Events {
		a, b := orig.Events[i], back.Events[i]
		require.Equal(t, orig.Stacks.Frames(a.Stack), back.Stacks.Frames(b.Stack), "event %d", i)
		a.Stack, b.Stack = 0, 0
		require.Equal(t, a, b, "event %d", i)
	}
	require.Len(t, back.Final, len(orig.Final))
	require.Equal(t, orig.Header.AllocatorSettings, back.Header.AllocatorSettings)

	_, direct, _ := runCLI("replay", "--check", "--format", "json", partialTrace)
	code, again, stderr := runCLI("replay", "--check", "--format", "json", out)
	require.Equal(t, 0, code, stderr)
	var a, b map[string]any
	require.NoError(t, json.Unmarshal([]byte(direct), &a))
	require.NoError(t, json.Unmarshal([]byte(again), &b))
	for _, k := range []string{"stats", "check", "fragmentation"} {
		require.NotNil(t, a[k], k)
		require.Equal(t, a[k], b[k], k)
	}

	// Through the native format (a streamed input) and under .PKL, the
	// same bytes.
	mrt := filepath.Join(dir, "fwd.mrt")
	code, _, stderr = runCLI("convert", partialTrace, mrt)
	require.Equal(t, 0, code, stderr)
	pkl := filepath.Join(dir, "fwd.PKL")
	code, stdout, stderr = runCLI("convert", "-q", mrt, pkl)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile(pkl)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// A memreplay trace (the trial model's) has memreplay's own annotations
// and no end state: trials and markers become user_defined entries, and
// the output says the segment list is empty.
func TestConvertSynthToPickle(t *testing.T) {
	dir := t.TempDir()
	mrt := filepath.Join(dir, "trial.mrt")
	code, _, stderr := runCLI("synth", "--model", "bert-base", "--batch", "2", "--seq-len", "32", "--steps", "1", "-o", mrt)
	require.Equal(t, 0, code, stderr)
	in, err := trace.Open(mrt)
	require.NoError(t, err)
	src, err := trace.ReadAll(in.Reader)
	require.NoError(t, err)
	in.Close()

	out := filepath.Join(dir, "trial.pkl")
	code, stdout, stderr := runCLI("convert", mrt, out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no end state in the input (empty segment list)")
	back, err := trace.ReadPyTorchFile(out)
	require.NoError(t, err)
	require.Len(t, back.Events, len(src.Events))
	require.Empty(t, back.Final)
	var trials []string
	for i, e := range src.Events {
		b := back.Events[i]
		switch e.Action {
		case trace.ActionTrialStart, trace.ActionTrialEnd, trace.ActionMarker:
			require.Equal(t, trace.ActionMarker, b.Action, "event %d", i)
			require.Equal(t, e.Label, b.Label, "event %d", i)
			if e.Action != trace.ActionMarker {
				trials = append(trials, back.Stacks.Frames(b.Stack)[0].Name) // the stage, as PyTorch writes a range
			}
		default:
			require.Equal(t, e.Action, b.Action, "event %d", i)
			require.Equal(t, e.Addr, b.Addr, "event %d", i)
			require.Equal(t, e.Size, b.Size, "event %d", i)
			require.Equal(t, src.Stacks.Frames(e.Stack), back.Stacks.Frames(b.Stack), "event %d", i)
		}
	}
	require.Equal(t, []string{"START", "END"}, trials)

	// The events were spooled as read, not held: the bytes are those of
	// the whole trace written from memory, as convert wrote them before.
	var want bytes.Buffer
	require.NoError(t, trace.WritePyTorch(&want, src))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want.Bytes(), got), "streamed convert differs from WritePyTorch of the whole trace")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 2, "trial.mrt and trial.pkl: no spool file left")
}

// A streamed trace with an event a snapshot cannot hold fails as the event
// is read, exit 2, with the event named, and leaves no file (nor spool).
func TestConvertToPickleBadEvent(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bad.mrt")
	require.NoError(t, trace.WriteFile(src, &trace.Trace{
		Header: trace.Header{Source: "memreplay"},
		Stacks: trace.NewStacks(),
		Events: []trace.Event{
			{Action: trace.ActionSegmentAlloc, Addr: 1 << 40, Size: 2 << 20},
			{Action: trace.ActionAlloc, Addr: 1 << 40, Size: 1 << 63},
		},
	}))
	out := filepath.Join(dir, "bad.pickle")
	code, _, stderr := runCLI("convert", src, out)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "cannot write "+out+": trace: writing a PyTorch snapshot: event 1 size")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "bad.mrt only")
}

// memreplay's own actions with no PyTorch entry are counted as left out.
func TestConvertToPickleLeavesOut(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "own.mrt")
	s := trace.NewStacks()
	require.NoError(t, trace.WriteFile(src, &trace.Trace{
		Header: trace.Header{Source: "memreplay"},
		Stacks: s,
		Events: []trace.Event{
			{Action: trace.ActionSegmentAlloc, Addr: 1 << 40, Size: 2 << 20},
			{Action: trace.ActionAlloc, Addr: 1 << 40, Size: 512},
			{Action: trace.ActionRecordStream, Addr: 1 << 40, Stream: 7},
			{Action: trace.ActionFreeRequested, Addr: 1 << 40, Size: 512},
			{Action: trace.ActionStreamSync, Stream: 7},
			{Action: trace.ActionFreeCompleted, Addr: 1 << 40, Size: 512},
			{Action: trace.ActionEmptyCache},
			{Action: trace.ActionSegmentFree, Addr: 1 << 40, Size: 2 << 20},
		},
		HasFinal: true,
		Final:    []trace.Segment{},
	}))
	out := filepath.Join(dir, "own.pickle")
	code, stdout, stderr := runCLI("convert", src, out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "PyTorch snapshot, 5 trace entries, end state of 0 segments")
	require.Contains(t, stdout, "3 events with no PyTorch equivalent left out (empty_cache, stream_sync, record_stream)")
	back, err := trace.ReadPyTorchFile(out)
	require.NoError(t, err)
	require.Len(t, back.Events, 5)
}

// A failure leaves nothing under the output's name.
func TestConvertToPickleFailure(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "missing", "x.pickle")
	code, _, stderr := runCLI("convert", partialTrace, out)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "missing")
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err))

	// The same file as input and output is refused before anything is
	// written.
	code, _, stderr = runCLI("convert", partialTrace, partialTrace)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "same file")
}

func TestConvertHelpMentionsPickle(t *testing.T) {
	code, stdout, _ := runCLI("help", "convert")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "memreplay convert trial.mrt trial.pickle   # open in pytorch.org/memory_viz")
	require.Contains(t, stdout, ".pickle or .pkl")
	require.True(t, isPickleName("a.PICKLE") && isPickleName("b.pkl") && !isPickleName("c.mrt") && !isPickleName("pickle"))
	require.Equal(t, "1 trace entry", plural(1, "trace entry"))
	require.Equal(t, "2 trace entries", plural(2, "trace entry"))
	require.Equal(t, "0 segments", plural(0, "segment"))
	require.False(t, strings.Contains(convertHelp, "\t"), "help text is indented with spaces")
}

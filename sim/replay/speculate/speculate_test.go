package speculate_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/sim/replay/speculate"
	"github.com/memreplay/memreplay/trace"
)

// The traces the tests replay: generated trials, the project's copies of
// real snapshots, and the real snapshots beside the checkout (skipped
// where absent).
const (
	trialTraces  = "../../../traces/trial"
	ownTraces    = "../../../traces/pytorch"
	sharedTraces = "../../../../shared/traces/pytorch"
)

// speculateAll makes OpenReplay speculate on every snapshot (or on none).
func speculateAll(t *testing.T, on bool) {
	old, oldProcs := speculate.MinBytes, speculate.MinProcs
	speculate.MinBytes, speculate.MinProcs = 0, 1
	if !on {
		speculate.MinBytes = math.MaxInt64
	}
	t.Cleanup(func() { speculate.MinBytes, speculate.MinProcs = old, oldProcs })
}

// overlapRun is what the tests compare of one OpenReplay: the result, the
// profile, the header and the stack table the report would read.
type overlapRun struct {
	res     *replay.Result
	prof    *profiler.Profile
	header  trace.Header
	stacks  int
	how     speculate.Outcome
	openErr error
	runErr  error
}

func openReplay(t *testing.T, path string, opts replay.Options, spec bool) overlapRun {
	t.Helper()
	speculateAll(t, spec)
	o, res, prof, how, err := speculate.OpenReplay(path, opts, func(r trace.Reader, n int64, bounds *speculate.EventBounds) (*replay.Result, *profiler.Profiler, error) {
		opts := opts
		po := profiler.Options{ExpectedEvents: n, MaxSamples: 300}
		if bounds != nil {
			po.EventBounds = bounds
		}
		prof := profiler.New(r.Stacks(), po)
		opts.Recorder = prof
		res, err := replay.Run(r, opts)
		return res, prof, err
	})
	if o == nil {
		require.Error(t, err)
		return overlapRun{openErr: err, how: how}
	}
	defer o.Close()
	run := overlapRun{res: res, header: o.Reader.Header(), stacks: o.Reader.Stacks().NumStacks(), how: how, runErr: err}
	if err == nil {
		run.prof = prof.Finish()
	}
	return run
}

// requireSameReplay runs path with and without speculation and requires
// the same outcome; it returns how the speculating run went.
func requireSameReplay(t *testing.T, path string, opts replay.Options) speculate.Outcome {
	t.Helper()
	want := openReplay(t, path, opts, false)
	require.Equal(t, speculate.NotSpeculated, want.how)
	got := openReplay(t, path, opts, true)
	require.Equal(t, want.openErr, got.openErr, path)
	require.Equal(t, want.runErr, got.runErr, path)
	require.Equal(t, want.res, got.res, path)
	require.Equal(t, want.prof, got.prof, path)
	require.Equal(t, want.header, got.header, path)
	require.Equal(t, want.stacks, got.stacks, path)
	return got.how
}

// writeRecording replays a trial trace with opts and writes the recording
// as a snapshot pickle: a trace recorded from the start, with an end
// state and the settings replayed under.
func writeRecording(t *testing.T, name string, opts replay.Options) string {
	t.Helper()
	data := replaytest.RecordPyTorch(t, replaytest.TrialTrace(t, filepath.Join(trialTraces, name)), opts)
	path := filepath.Join(t.TempDir(), "rec.pickle")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// A snapshot recorded from the start with the default settings is
// replayed while it is imported, and that replay is kept (confirmed):
// the result, the profile (timeline spaced by the number of events, known
// only at the end of the import; sites named from the stack table filled
// in after the import), the header are those of the replay after the
// import; with --check and under other settings (--alloc-conf) too.
func TestOpenReplaySpeculationConfirmed(t *testing.T) {
	path := writeRecording(t, "bert-base_b16_s128_fp16.mrt", replay.Options{})
	require.Equal(t, speculate.Confirmed, requireSameReplay(t, path, replay.Options{Name: path}))
	require.Equal(t, speculate.Confirmed, requireSameReplay(t, path, replay.Options{Name: path, Check: true}))
	es, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	require.Equal(t, speculate.Confirmed, requireSameReplay(t, path, replay.Options{Name: path, Config: &es}))
}

// A snapshot whose trace begins mid-run (the real ones: recorded after
// the model was loaded, or a ring buffer that wrapped) needs the state
// the reconstruction derives at the end: the speculative replay is
// discarded and the trace replayed again, with the same result. So is
// one recorded from the start under settings other than the defaults,
// found only at the end of the file (allocator_settings comes after the
// entries), after the speculative replay ran to its end.
func TestOpenReplaySpeculationDiscarded(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(ownTraces, "*.pickle"))
	shared, _ := filepath.Glob(filepath.Join(sharedTraces, "*.pickle"))
	files = append(files, shared...)
	require.NotEmpty(t, files)
	discarded := 0
	for _, f := range files {
		o, rec, err := replay.OpenPrepared(f)
		require.NoError(t, err)
		require.NoError(t, o.Close())
		for _, opts := range []replay.Options{{Name: f, Lenient: true}, {Name: f, Check: true}} {
			how := requireSameReplay(t, f, opts)
			if rec != nil {
				require.Equal(t, speculate.Discarded, how, f)
				discarded++
			}
		}
	}
	require.Greater(t, discarded, 3)

	es, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	path := writeRecording(t, "bert-base_b16_s128_fp16.mrt", replay.Options{Config: &es})
	require.Equal(t, speculate.Discarded, requireSameReplay(t, path, replay.Options{Name: path}))
	// Its settings do not matter when the options replace them.
	ms, err := config.Parse("max_split_size_mb:64")
	require.NoError(t, err)
	require.Equal(t, speculate.Confirmed, requireSameReplay(t, path, replay.Options{Name: path, Config: &ms}))
}

// A snapshot whose length is not within the bounds the import's progress
// gave (here a long string after the entries, which the estimate takes
// for entries still to come) has the speculative replay discarded at the
// end, and the same result: its profiler's samples are not those of the
// length. The same snapshot without the string keeps it.
func TestOpenReplaySpeculationOutsideBounds(t *testing.T) {
	path := writeRecording(t, "bert-base_b16_s128_fp16.mrt", replay.Options{})
	require.Equal(t, speculate.Confirmed, requireSameReplay(t, path, replay.Options{Name: path}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, byte('.'), data[len(data)-1]) // STOP, the root dict alone on the stack
	// root["padding"] = "xx...": BINUNICODE key, BINUNICODE value, SETITEM.
	pad := func(s string) []byte {
		b := []byte{'X', 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(len(s)))
		return append(b, s...)
	}
	padded := append([]byte(nil), data[:len(data)-1]...)
	padded = append(padded, pad("padding")...)
	padded = append(padded, pad(strings.Repeat("x", 1<<20))...)
	padded = append(padded, 's', '.')
	path = filepath.Join(t.TempDir(), "padded.pickle")
	require.NoError(t, os.WriteFile(path, padded, 0o644))
	require.Equal(t, speculate.Discarded, requireSameReplay(t, path, replay.Options{Name: path}))
}

// Bad input is the import's error, as without speculation; a file that
// is not there too.
func TestOpenReplaySpeculationBadInput(t *testing.T) {
	path := writeRecording(t, "bert-base_b16_s128_fp16.mrt", replay.Options{})
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.pickle")
	require.NoError(t, os.WriteFile(cut, data[:len(data)*2/3], 0o644))
	for _, p := range []string{cut, filepath.Join(t.TempDir(), "missing.pickle")} {
		want := openReplay(t, p, replay.Options{Name: p}, false)
		got := openReplay(t, p, replay.Options{Name: p}, true)
		require.Error(t, want.openErr)
		require.Equal(t, want.openErr.Error(), got.openErr.Error())
	}
}

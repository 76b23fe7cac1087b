package profiler_test

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// everyStep hides the profiler's GateSteps: the replay then calls its
// Step after every event, as before the gate (issue 19).
type everyStep struct{ replay.Recorder }

// Marker passes the trace's markers on: the gate is what differs.
func (e everyStep) Marker(device int32, index int64, ev *trace.Event) {
	e.Recorder.(replay.MarkerRecorder).Marker(device, index, ev)
}

// Annotations passes the trace's annotations on, as Marker does.
func (e everyStep) Annotations(ann []trace.Annotation) {
	e.Recorder.(replay.AnnotationRecorder).Annotations(ann)
}

// countSteps is the profiler under the gate, counting the Steps the
// replay still calls.
type countSteps struct {
	*profiler.Profiler
	steps int64
}

func (c *countSteps) Step(index int64, e *trace.Event) {
	c.steps++
	c.Profiler.Step(index, e)
}

// gateTraces are the traces the gate is checked on: the repository's
// snapshots, recordings and trials (record_stream, restored state,
// several devices), the workload with out-of-range devices' events mixed
// in, and a snapshot whose free_completed entries come late (frees the
// replay defers on its private streams).
func gateTraces(t *testing.T) map[string]*trace.Trace {
	out := map[string]*trace.Trace{"lengthWorkload": lengthWorkload(t, 6000)}
	files, err := filepath.Glob("../traces/*/*")
	require.NoError(t, err)
	for _, f := range files {
		var tr *trace.Trace
		switch {
		case strings.HasSuffix(f, ".pickle"):
			tr, err = trace.ReadPyTorchFile(f)
			require.NoError(t, err)
			_, err = replay.Prepare(tr)
			require.NoError(t, err)
		case strings.HasSuffix(f, ".mrt"):
			o, err := trace.Open(f)
			require.NoError(t, err)
			tr, err = trace.ReadAll(o.Reader)
			require.NoError(t, err)
			require.NoError(t, o.Close())
		default:
			continue
		}
		out[filepath.Base(f)] = tr
		if filepath.Base(f) == "bert-base_b8_s128_fp16.pickle" {
			late := *tr
			late.Events = append([]trace.Event(nil), tr.Events...)
			moved := 0
			for i := 0; i+3 < len(late.Events) && moved < 400; i++ {
				if late.Events[i].Action == trace.ActionFreeCompleted && i%7 == 0 {
					e := late.Events[i]
					copy(late.Events[i:i+3], late.Events[i+1:i+4])
					late.Events[i+3] = e
					i += 3
					moved++
				}
			}
			require.Greater(t, moved, 100)
			out["late-completions"] = &late
		}
	}
	require.Greater(t, len(out), 8)
	return out
}

// TestGatedStepsSameProfile: the profiler under the replay's step gate
// (Steps only where due, the index and time read from the replay's
// position) gives the same profile as with a Step after every event, on
// every trace and with samples, length bounds and the peak's detail;
// and the gate spares most Steps.
func TestGatedStepsSameProfile(t *testing.T) {
	for name, tr := range gateTraces(t) {
		n := int64(len(tr.Events))
		for _, opts := range []profiler.Options{
			{MaxSamples: 16},
			{ExpectedEvents: n},
			{MaxSamples: 64, DetailEvents: 40},
			{MaxSamples: 32, EventBounds: &scriptedBounds{n: n, lo: 1, hi: 4 * n, meetAt: 40}},
		} {
			run := func(wrap func(*profiler.Profiler) replay.Recorder) (*profiler.Profile, *replay.Result) {
				if sb, ok := opts.EventBounds.(*scriptedBounds); ok {
					fresh := *sb
					fresh.rng = rand.New(rand.NewPCG(uint64(n), 7))
					opts.EventBounds = &fresh
				}
				p := profiler.New(tr.Stacks, opts)
				res, err := replay.Run(tr.NewReader(), replay.Options{Recorder: wrap(p), Lenient: true, OOM: replay.OOMSkip})
				require.NoError(t, err, name)
				return p.Finish(), res
			}
			want, wantRes := run(func(p *profiler.Profiler) replay.Recorder { return everyStep{p} })
			var c *countSteps
			got, gotRes := run(func(p *profiler.Profiler) replay.Recorder { c = &countSteps{Profiler: p}; return c })
			require.Equal(t, wantRes, gotRes, name)
			require.Equal(t, want, got, "%s %+v", name, opts)
			if opts.DetailEvents == 0 && opts.EventBounds == nil && n > 2000 {
				t.Logf("%s: %d steps of %d events", name, c.steps, n)
				require.Less(t, c.steps, n/2, "%s: the gate spares most Steps", name)
			}
		}
	}
}

// TestGatedStepDatesSegments: under the gate a segment the first malloc
// after a run of unstepped events creates is dated with its own event,
// as the Step after every event dated it.
func TestGatedStepDatesSegments(t *testing.T) {
	st := trace.NewStacks()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", Devices: []trace.Device{{Index: 0, Capacity: 8 << 30}}}, Stacks: st}
	_, a := newAllocator(t, 8<<30, "", 0)
	rec := replay.Record(a, 0, func(e *trace.Event) {
		e.TimeUS = int64(len(tr.Events)+1) * 5
		tr.Events = append(tr.Events, *e)
	})
	b, err := a.Malloc(1<<20, 0)
	require.NoError(t, err)
	for range 50 { // cached: no segment
		require.NoError(t, a.Free(b))
		b, err = a.Malloc(1<<20, 0)
		require.NoError(t, err)
	}
	big, err := a.Malloc(1<<30, 0) // a new segment, its entry before the alloc
	require.NoError(t, err)
	_ = big
	rec.Stop()
	var allocAt int64 = -1
	for i, e := range tr.Events {
		if e.Action == trace.ActionAlloc && e.Size == 1<<30 {
			allocAt = int64(i)
		}
	}
	require.Positive(t, allocAt)
	p := profiler.New(tr.Stacks, profiler.Options{MaxSamples: 4})
	_, err = replay.Run(tr.NewReader(), replay.Options{Recorder: p})
	require.NoError(t, err)
	prof := p.Finish()
	require.Equal(t, allocAt, prof.Total.PeakReservedEvent)
	require.Equal(t, allocAt, prof.Devices[0].PeakReservedEvent)
}

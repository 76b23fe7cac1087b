package par

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// FromTraces reads trace files (any format trace.Open reads) and returns
// their trials, with notes on what was adapted. A file's trials are the
// events between each trial_start and its trial_end; a file without them is
// one trial. Only the requests matter (the recording allocator's decisions are
// dropped: the workers decide for themselves) and only the first device's.
//
// A partial trace (a PyTorch snapshot recorded after the model was loaded)
// is completed as sim/replay completes it: the blocks live before its first
// event are allocated at the trial's start, so the trial holds what the
// recorded program held. Frees of blocks a trial never allocated (allocated
// before a trial_start, or outside what the reconstruction found) are
// dropped. A trial whose events carry no times is given one microsecond per
// event, so that it still takes time on the workers' clock.
func FromTraces(paths []string) ([]Trial, []string, error) {
	var trials []Trial
	var notes []string
	for _, p := range paths {
		ts, ns, err := fromTrace(p)
		if err != nil {
			return nil, nil, err
		}
		trials = append(trials, ts...)
		notes = append(notes, ns...)
	}
	if len(trials) == 0 {
		return nil, nil, fmt.Errorf("par: no trial in %v", paths)
	}
	return trials, notes, nil
}

// Pool draws uniformly from trials.
func Pool(trials []Trial) func(rng *rand.Rand) Trial {
	return func(rng *rand.Rand) Trial { return trials[rng.IntN(len(trials))] }
}

func fromTrace(path string) ([]Trial, []string, error) {
	o, err := trace.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer o.Close()
	t := o.Trace
	if t == nil {
		if t, err = trace.ReadAll(o.Reader); err != nil {
			return nil, nil, err
		}
	}
	var notes []string
	if o.Format == trace.FormatPyTorch {
		rec, err := replay.Prepare(t)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if rec != nil && rec.LiveBlocks > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d blocks (%d bytes) live before the first event are allocated at the trial's start",
				path, rec.LiveBlocks, rec.LiveBytes))
		}
	}
	dev, ok := firstDevice(t)
	if !ok {
		return nil, nil, fmt.Errorf("%s: no allocation in the trace", path)
	}
	base := filepath.Base(path)
	var trials []Trial
	var cur []trace.Event
	in, marked := false, false
	label := ""
	dropped := 0
	flush := func() {
		if len(cur) == 0 {
			return
		}
		evs, n := clean(cur)
		dropped += n
		name := base
		if marked {
			name = fmt.Sprintf("%s#%d", base, len(trials)+1)
			if label != "" {
				name += " " + label
			}
		}
		trials = append(trials, newTrial(name, t, evs))
		cur = nil
	}
	for _, e := range t.Events {
		if e.Device != dev {
			continue
		}
		switch e.Action {
		case trace.ActionTrialStart:
			if !marked {
				// Events before the first trial are not a trial's.
				cur = nil
			}
			flush()
			in, marked, label = true, true, e.Label
			cur = append(cur, e)
		case trace.ActionTrialEnd:
			cur = append(cur, e)
			flush()
			in = false
		case trace.ActionAlloc, trace.ActionFreeRequested, trace.ActionFreeCompleted,
			trace.ActionRecordStream, trace.ActionEmptyCache, trace.ActionStreamSync:
			if in || !marked {
				cur = append(cur, e)
			}
		}
	}
	if !marked {
		cur = append(initialAllocs(t, dev), cur...)
	}
	flush()
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d frees of blocks allocated outside their trial were dropped", path, dropped))
	}
	if len(trials) == 0 {
		return nil, nil, fmt.Errorf("%s: no trial with events", path)
	}
	return trials, notes, nil
}

// firstDevice is the lowest device index with an allocation.
func firstDevice(t *trace.Trace) (int32, bool) {
	dev, ok := int32(0), false
	for i := range t.Events {
		e := &t.Events[i]
		if e.Action == trace.ActionAlloc && (!ok || e.Device < dev) {
			dev, ok = e.Device, true
		}
	}
	return dev, ok
}

// initialAllocs allocates the blocks live at the trace's start, at the time of
// its first event.
func initialAllocs(t *trace.Trace, dev int32) []trace.Event {
	var at int64
	if len(t.Events) > 0 {
		at = t.Events[0].TimeUS
	}
	var out []trace.Event
	for _, s := range t.Initial {
		if s.Device != dev {
			continue
		}
		for _, b := range s.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			size := b.RequestedSize
			if size == 0 {
				size = b.Size
			}
			out = append(out, trace.Event{Action: trace.ActionAlloc, Device: dev, Addr: b.Address, Size: size, Stream: s.Stream, TimeUS: at, Stack: b.Stack})
		}
	}
	return out
}

// clean drops frees of addresses the trial does not hold, and gives a trial
// without times one microsecond per event.
func clean(evs []trace.Event) ([]trace.Event, int) {
	held := map[uint64]bool{}
	out := make([]trace.Event, 0, len(evs))
	dropped := 0
	for _, e := range evs {
		switch e.Action {
		case trace.ActionAlloc:
			if held[e.Addr] {
				// The recording lost this address's free (a ring
				// buffer's gap): free it before its reuse.
				out = append(out, trace.Event{Action: trace.ActionFreeRequested, Device: e.Device, Addr: e.Addr, TimeUS: e.TimeUS})
			}
			held[e.Addr] = true
		case trace.ActionFreeRequested, trace.ActionRecordStream:
			if !held[e.Addr] {
				dropped++
				continue
			}
			if e.Action == trace.ActionFreeRequested {
				delete(held, e.Addr)
			}
		}
		out = append(out, e)
	}
	if len(out) > 1 && out[0].TimeUS == out[len(out)-1].TimeUS {
		for i := range out {
			out[i].TimeUS = int64(i)
		}
	}
	return out, dropped
}

func newTrial(label string, t *trace.Trace, evs []trace.Event) Trial {
	sub := &trace.Trace{Header: t.Header, Stacks: t.Stacks, Events: evs}
	var d time.Duration
	if len(evs) > 1 {
		d = time.Duration(evs[len(evs)-1].TimeUS-evs[0].TimeUS) * time.Microsecond
	}
	return Trial{Label: label, Open: func() (trace.Reader, error) { return sub.NewReader(), nil }, Duration: d}
}

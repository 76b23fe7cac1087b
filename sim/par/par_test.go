package par_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/trace"
)

func settings(t *testing.T, confs ...string) []par.Setting {
	t.Helper()
	var out []par.Setting
	for _, c := range confs {
		cfg, err := config.Parse(c)
		require.NoError(t, err)
		out = append(out, par.Setting{Name: c, Config: cfg})
	}
	return out
}

// small is the pinned experiment: an 8 GiB GPU (500 MiB contexts), trials
// that fragment a cache, PAR 1..6, 20 mixes of 3 trials per worker.
func small(t *testing.T) par.Options {
	return par.Options{
		Capacity: 8 * giB, Settings: settings(t, "", "expandable_segments:True"),
		MaxPAR: 6, Mixes: 20, Seed: 1, Confidence: 0.9,
		Sample: fragmenting, Source: "fragmenting test trials",
	}
}

func TestPinnedAnswerAndExpandableSegments(t *testing.T) {
	rep, err := par.Run(small(t))
	require.NoError(t, err)
	require.Len(t, rep.Results, 2)
	def, exp := rep.Results[0], rep.Results[1]

	// With the default allocator every trial strands a segment per step
	// (a kept tensor pins each freed activation's segment): one trial
	// alone fits; two run out of memory in 1 mix of 20, which at 90%
	// confidence is not safe; three in 11.
	assert.Equal(t, 1, def.SafePAR)
	assert.Equal(t, 1, def.NoOOMPAR)
	assert.Equal(t, []int{0, 1, 11, 20, 20, 20}, oomMixes(def))
	assert.Positive(t, def.Rows[1].Retries, "at PAR 2 allocators release their caches and retry")
	// Expandable segments unmap the holes when the allocator retries:
	// five fit, and the sixth fails on the contexts' memory alone.
	assert.Equal(t, 5, exp.SafePAR)
	assert.Equal(t, []int{0, 0, 0, 0, 0, 20}, oomMixes(exp))
	assert.Greater(t, def.Rows[1].Waste, 3*exp.Rows[1].Waste, "fragmentation is the cause")

	// The hand estimate: fooled by the inflated solo peak with the
	// defaults, close with expandable segments.
	assert.Equal(t, 1, def.NaiveMedian)
	assert.Equal(t, 1, def.NaiveMax)
	assert.Equal(t, 5, exp.NaiveMedian)
	assert.Equal(t, 4, exp.NaiveMax)

	// The verdicts' arithmetic.
	for _, res := range rep.Results {
		assert.Equal(t, 1.0, res.Rows[0].Speedup)
		for _, row := range res.Rows {
			assert.LessOrEqual(t, row.PeakUsedMax, rep.Capacity)
			assert.Equal(t, rep.Capacity-row.PeakUsedMax, row.HeadroomMin)
			assert.Equal(t, row.Completed+row.PrunedOOM+row.Failed, row.Trials)
			assert.Equal(t, 20*3*row.PAR, row.Trials)
		}
		require.Positive(t, res.BestPAR)
		assert.LessOrEqual(t, res.BestPAR, res.SafePAR)
		for _, row := range res.Rows[:res.SafePAR] {
			assert.LessOrEqual(t, row.TrialsPerHour, res.Rows[res.BestPAR-1].TrialsPerHour)
		}
	}
	assert.Equal(t, 15, rep.MixesNeeded)
}

func oomMixes(r par.Result) []int {
	var out []int
	for _, row := range r.Rows {
		out = append(out, row.MixesWithOOM)
	}
	return out
}

func TestSameSeedSameReportWhateverTheParallelism(t *testing.T) {
	o := small(t)
	o.MaxPAR, o.Mixes = 4, 6
	o.Parallel = 1
	a, err := par.Run(o)
	require.NoError(t, err)
	o.Parallel = 3
	b, err := par.Run(o)
	require.NoError(t, err)
	assert.Equal(t, jsonOf(t, a), jsonOf(t, b))
	o.Seed = 2
	c, err := par.Run(o)
	require.NoError(t, err)
	assert.NotEqual(t, jsonOf(t, a), jsonOf(t, c))
}

func jsonOf(t *testing.T, r *par.Report) string {
	b, err := json.Marshal(r)
	require.NoError(t, err)
	return string(b)
}

func TestContentionBoundsTheSpeedup(t *testing.T) {
	o := small(t)
	o.Settings = o.Settings[1:] // expandable: no OOM up to 5
	o.MaxPAR, o.Mixes = 4, 8
	// One trial shape for everyone, so that PARs differ only by how
	// they share the GPU.
	one := fragmenting(rand.New(rand.NewPCG(5, 5)))
	o.Sample = func(*rand.Rand) par.Trial { return one }
	for _, share := range []float64{1, 0.5, 0.25} {
		o.Share = share
		rep, err := par.Run(o)
		require.NoError(t, err)
		rows := rep.Results[0].Rows
		for _, row := range rows[1:] {
			// Compute gains at most min(k, 1/share); device calls
			// (a few percent of a worker's time here), which do not
			// compute, overlap the others' compute.
			bound := min(float64(row.PAR), 1/share)
			assert.LessOrEqual(t, row.Speedup, bound/(1-rows[0].DeviceTimeShare), "share %v PAR %d", share, row.PAR)
			assert.Greater(t, row.Speedup, bound*0.95, "share %v PAR %d", share, row.PAR)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	good := small(t)
	for name, f := range map[string]func(o *par.Options){
		"capacity":   func(o *par.Options) { o.Capacity = 0 },
		"context":    func(o *par.Options) { o.ContextOverhead = o.Capacity },
		"settings":   func(o *par.Options) { o.Settings = nil },
		"max par":    func(o *par.Options) { o.MaxPAR = -1 },
		"mixes":      func(o *par.Options) { o.Mixes = -3 },
		"confidence": func(o *par.Options) { o.Confidence = 1 },
		"share":      func(o *par.Options) { o.Share = 2 },
		"sample":     func(o *par.Options) { o.Sample = nil },
	} {
		o := good
		f(&o)
		_, err := par.Run(o)
		assert.Error(t, err, name)
	}
}

func TestRendersAllFormats(t *testing.T) {
	o := small(t)
	o.MaxPAR, o.Mixes = 3, 4
	rep, err := par.Run(o)
	require.NoError(t, err)
	var tb, md bytes.Buffer
	require.NoError(t, par.WriteTable(&tb, rep))
	require.NoError(t, par.WriteMarkdown(&md, rep))
	for _, s := range []string{tb.String(), md.String()} {
		assert.Contains(t, s, "alloc-conf (PyTorch defaults)")
		assert.Contains(t, s, "alloc-conf expandable_segments:True")
		assert.Contains(t, s, "none can be shown with 4 mixes (need 15)")
		assert.Contains(t, s, "naive estimate")
	}
	assert.Contains(t, md.String(), "| PAR |")
	assert.Contains(t, tb.String(), "+-----+")
}

func TestPoolDrawsEveryTrial(t *testing.T) {
	ts := []par.Trial{{Label: "a"}, {Label: "b"}, {Label: "c"}}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for i := 0; i < 300; i++ {
		seen[par.Pool(ts)(rng).Label]++
	}
	assert.Len(t, seen, 3)
}

func TestTrialsTooBigAloneDoNotCountAsSharingOOMs(t *testing.T) {
	// A trial that asks for more than the GPU holds.
	tr := &trace.Trace{Stacks: trace.NewStacks(), Events: []trace.Event{
		{Action: trace.ActionTrialStart, Label: "huge"},
		{Action: trace.ActionAlloc, Addr: 1, Size: 9 * giB, TimeUS: 1000},
		{Action: trace.ActionFreeRequested, Addr: 1, TimeUS: 2000},
		{Action: trace.ActionTrialEnd, TimeUS: 3000},
	}}
	hugeT := par.Trial{Label: "huge", Open: func() (trace.Reader, error) { return tr.NewReader(), nil }, Duration: 3 * time.Millisecond}
	o := small(t)
	o.Settings = o.Settings[1:]
	o.MaxPAR, o.Mixes = 2, 16
	o.Sample = func(rng *rand.Rand) par.Trial {
		if rng.IntN(4) == 0 {
			return hugeT
		}
		return fragmenting(rng)
	}
	rep, err := par.Run(o)
	require.NoError(t, err)
	res := rep.Results[0]
	assert.Positive(t, res.SoloTooBig)
	assert.Equal(t, 16*2*3, res.SoloTrials)
	assert.Positive(t, res.Rows[0].TooBig)
	assert.Equal(t, res.Rows[0].TooBig, res.Rows[0].PrunedOOM, "alone, only the huge trials fail")
	assert.Equal(t, 0, res.Rows[0].MixesWithOOM)
	assert.Equal(t, 2, res.SafePAR)
}

package profiler_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// TestReplayConsistency replays the repository's sample traces with the
// profiler attached, under the recorded settings and under expandable
// segments, and checks its incremental figures against the allocator's own
// statistics and its captures against themselves.
func TestReplayConsistency(t *testing.T) {
	var files []string
	pats := []string{"../traces/pytorch/*.pickle", "../trace/testdata/*.pickle", "../trace/testdata/rmm_basic.csv"}
	// More traces on request, e.g.
	// MEMREPLAY_PROFILER_TRACES='/work/shared/traces/pytorch/*.pickle'.
	if extra := os.Getenv("MEMREPLAY_PROFILER_TRACES"); extra != "" {
		pats = append(pats, extra)
	}
	for _, pat := range pats {
		m, err := filepath.Glob(pat)
		require.NoError(t, err)
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no sample traces")
	}
	expandable, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	for _, f := range files {
		for _, conf := range []*config.Config{nil, &expandable} {
			name := filepath.Base(f)
			if conf != nil {
				name += "/expandable"
			}
			t.Run(name, func(t *testing.T) {
				o, err := trace.Open(f)
				require.NoError(t, err)
				defer o.Close()
				_, err = replay.PrepareOpened(o)
				require.NoError(t, err)
				p := profiler.New(o.Reader.Stacks(), profiler.Options{MaxSamples: 64})
				res, err := replay.Run(o.Reader, replay.Options{Name: f, Recorder: p, Lenient: true, OOM: replay.OOMSkip, Config: conf})
				require.NoError(t, err)
				prof := p.Finish()
				checkProfile(t, res, prof)
			})
		}
	}
}

func checkProfile(t *testing.T, res *replay.Result, prof *profiler.Profile) {
	t.Helper()
	assert.Equal(t, res.Events, prof.Events)
	require.Len(t, prof.Devices, len(res.Devices))
	var peakLive uint64
	for i, dr := range res.Devices {
		d := prof.Devices[i]
		require.Equal(t, dr.Index, d.Index)
		st := dr.Stats
		assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Peak), d.PeakReservedBytes, "peak reserved")
		assert.Equal(t, uint64(st.ReservedBytes[allocator.StatAll].Current), d.FinalReservedBytes, "final reserved")
		assert.Equal(t, uint64(st.AllocatedBytes[allocator.StatAll].Current), d.FinalLiveBytes, "final live")
		// A recorded OOM that the replay could serve allocates and frees
		// a block the program never had: the allocator's peak may count it.
		assert.LessOrEqual(t, d.PeakLiveBytes, uint64(st.AllocatedBytes[allocator.StatAll].Peak), "peak live")
		assert.Equal(t, st.NumOOMs, d.OOMs)
		assert.Equal(t, st.NumAllocRetries, d.AllocRetries)
		assert.LessOrEqual(t, d.PeakLiveBytes, d.PeakReservedBytes)
		peakLive = max(peakLive, d.PeakLiveBytes)
		if d.PeakLiveBytes > 0 {
			require.NotNil(t, d.Peak)
			checkCapture(t, d.Peak)
			assert.Equal(t, d.PeakLiveBytes, d.Peak.LiveBytes)
			assert.LessOrEqual(t, d.LargestFreeBlockBytesAtPeak, d.ReservedBytesAtPeak-d.PeakLiveBytes)
		}
	}
	assert.GreaterOrEqual(t, prof.Total.PeakLiveBytes, peakLive)
	if prof.Total.PeakLiveBytes > 0 {
		require.NotNil(t, prof.Peak)
		checkCapture(t, prof.Peak)
	}
	assert.LessOrEqual(t, len(prof.Timeline), 64)
	var live, stranded uint64
	for _, s := range prof.Sites {
		live += s.LiveBytesAtPeak
		stranded += s.StrandedBytesAtPeak
	}
	if prof.Peak != nil {
		assert.Equal(t, prof.Peak.LiveBytes, live)
		assert.Equal(t, prof.Peak.StrandedBytes, stranded)
	}
	for _, o := range prof.OOMs {
		if o.Capture != nil {
			checkCapture(t, o.Capture)
			// The reconstruction of the present agrees with FreeSummary.
			assert.Equal(t, o.FreeBytes, o.Capture.FreeBytes, "free bytes at the OOM at event %d", o.Event)
			assert.Equal(t, o.LargestFreeBlockBytes, o.Capture.LargestFreeBlockBytes)
		}
	}
}

// checkCapture: the sites add up to the capture's totals.
func checkCapture(t *testing.T, c *profiler.Capture) {
	t.Helper()
	var live, stranded uint64
	for _, s := range c.Sites {
		live += s.LiveBytes
		stranded += s.StrandedBytes
	}
	assert.Equal(t, c.LiveBytes, live, "live bytes by site (event %d)", c.Event)
	assert.Equal(t, c.StrandedBytes, stranded, "stranded bytes by site")
	assert.LessOrEqual(t, c.LiveBytes+c.StrandedBytes, c.ReservedBytes)
	assert.LessOrEqual(t, c.LargestFreeBlockBytes, c.FreeBytes)
}

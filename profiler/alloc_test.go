package profiler_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/profiler"
)

// A profiler told how many events to expect, given none, still has no
// timeline (JSON null), as before the timeline was sized from the count.
func TestTimelineNilWithoutSamples(t *testing.T) {
	p := profiler.New(nil, profiler.Options{ExpectedEvents: 1000})
	prof := p.Finish()
	require.Nil(t, prof.Timeline)
	js, err := json.Marshal(prof)
	require.NoError(t, err)
	require.Contains(t, string(js), `"timeline":null`)
}

// In a capture, each segment's blocks are a slice of their own length
// (appending to one never overwrites the next one's), and a segment with
// no active block has an empty list, JSON [], not null.
func TestCaptureLayoutBlocks(t *testing.T) {
	p := profiler.New(nil, profiler.Options{})
	r := newRig(t, p, 0, 1<<34, "")
	r.malloc("a", 30*MiB, 1)
	r.malloc("b", 30*MiB, 2)
	r.free("a")
	r.malloc("c", 50*MiB, 3) // a's segment, cached and empty, cannot hold it
	prof := p.Finish()
	peak := prof.Devices[0].Peak
	require.NotNil(t, peak)
	require.Len(t, peak.Layout, 3)
	empty := 0
	for i := range peak.Layout {
		bl := peak.Layout[i].Blocks
		require.NotNil(t, bl, "segment %d", i)
		require.Equal(t, len(bl), cap(bl), "segment %d: no room to append into the next segment's blocks", i)
		if len(bl) == 0 {
			empty++
		}
	}
	require.Equal(t, 1, empty, "a's segment")
	js, err := json.Marshal(peak)
	require.NoError(t, err)
	require.Contains(t, string(js), `"blocks":[]`)
}

// The sites' frame lists share arrays but each is a slice of its own
// length: appending to one site's frames never overwrites another's.
func TestSiteFramesDoNotAlias(t *testing.T) {
	p := profiler.New(stacksFor("a", "b", "c"), profiler.Options{})
	r := newRig(t, p, 0, 1<<34, "")
	r.malloc("a", MiB, 1)
	r.malloc("b", 2*MiB, 2)
	r.malloc("c", 3*MiB, 3)
	prof := p.Finish()
	require.Len(t, prof.Sites, 3)
	for _, s := range prof.Sites {
		require.Len(t, s.Frames, 2, "%s", s.Label)
		require.Equal(t, len(s.Frames), cap(s.Frames), "%s", s.Label)
	}
}

// Finish hands its profile the timeline itself, not a copy: a replay that
// goes on after it (samples appended, the timeline thinned in place) must
// not change that profile, and a second Finish gets a timeline of its own.
func TestFinishTimelineNotShared(t *testing.T) {
	p := profiler.New(nil, profiler.Options{MaxSamples: 4})
	r := newRig(t, p, 0, 1<<34, "")
	for i := range 6 {
		r.malloc(string(rune('a'+i)), MiB, 1)
	}
	first := p.Finish()
	require.NotEmpty(t, first.Timeline)
	want := append([]profiler.Sample(nil), first.Timeline...)
	second := p.Finish()
	require.Equal(t, want, second.Timeline)
	second.Timeline[0].LiveBytes = 12345
	require.Equal(t, want, first.Timeline, "a second Finish's timeline is its own")
	for i := range 20 {
		r.malloc(string(rune('k'+i)), MiB, 1) // samples, and thinning in place
	}
	third := p.Finish()
	require.Equal(t, want, first.Timeline, "the replay went on after Finish")
	require.NotEqual(t, want, third.Timeline)
}

package replay_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/internal/replaytest"
	"github.com/memreplay/memreplay/trace"
)

const mib = 1 << 20

// recordWorkload is replaytest.RecordWorkload with one side stream.
func recordWorkload(t *testing.T, conf string, capacity uint64, seed uint64, steps int) (*trace.Trace, config.Config, allocator.Stats) {
	return replaytest.RecordWorkload(t, conf, capacity, seed, steps)
}

var checkConfs = []string{
	"",
	"expandable_segments:True",
	"max_split_size_mb:20",
	"garbage_collection_threshold:0.6,max_split_size_mb:40",
	"roundup_power2_divisions:4",
	"roundup_power2_divisions:[256:8,>:2]",
	"expandable_segments:True,garbage_collection_threshold:0.5",
	"per_process_memory_fraction:0.5",
}

// A replay of a recording, with the recording's settings, must make every
// decision the recording made: this is what `replay --check` rests on.
func TestReplayReproducesRecording(t *testing.T) {
	for _, conf := range checkConfs {
		for seed := uint64(1); seed <= seeds(); seed++ {
			t.Run(fmt.Sprintf("%s/%d", conf, seed), func(t *testing.T) {
				tr, cfg, stats := recordWorkload(t, conf, 600*mib, seed, steps())
				res, err := replay.RunTrace(tr, replay.Options{Config: &cfg, Check: true, InvariantChecks: true})
				require.NoError(t, err)
				c := res.Check
				require.NotNil(t, c)
				require.Nil(t, c.FirstDivergence, "first divergence: %v", c.FirstDivergence)
				require.Equal(t, c.DecisionsExpected, c.DecisionsMatched)
				require.Greater(t, c.DecisionsExpected, int64(100))
				require.NotNil(t, c.FinalSegmentsMatch)
				require.True(t, *c.FinalSegmentsMatch, c.FinalDifference)
				require.True(t, c.Passed())
				got := res.Devices[0].Stats
				require.Equal(t, stats.NumOOMs, got.NumOOMs)
				require.Equal(t, stats.NumAllocRetries, got.NumAllocRetries)
				require.Equal(t, stats.NumDeviceAlloc, got.NumDeviceAlloc)
				require.Equal(t, stats.ReservedBytes, got.ReservedBytes)
				require.Equal(t, stats.AllocatedBytes[0].Peak, got.AllocatedBytes[0].Peak)
				require.Equal(t, int64(len(tr.Events)), res.Events)

				// Without check mode the simulated device of the recorded
				// capacity fails at the same points.
				res2, err := replay.RunTrace(tr, replay.Options{Config: &cfg, OOM: replay.OOMSkip})
				require.NoError(t, err)
				require.Equal(t, stats.NumOOMs, res2.Devices[0].Stats.NumOOMs)
				require.Equal(t, stats.ReservedBytes, res2.Devices[0].Stats.ReservedBytes)
				require.Empty(t, res2.Problems)
			})
		}
	}
}

func mustParse(t *testing.T, s string) config.Config {
	t.Helper()
	c, err := config.Parse(s)
	require.NoError(t, err)
	return c
}

// seeds and steps size the randomized replay tests: smaller under the race
// detector or -short.
func seeds() uint64 {
	if raceEnabled || testing.Short() {
		return 1
	}
	return 3
}

func steps() int {
	if raceEnabled || testing.Short() {
		return 1000
	}
	return 2000
}

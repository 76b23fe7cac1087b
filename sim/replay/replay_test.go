package replay_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/trace"
	"github.com/memreplay/memreplay/sim"
	"github.com/memreplay/memreplay/sim/replay"
)

const mib = 1 << 20

// recordWorkload runs a random workload on a fresh allocator with conf on a
// simulated device of capacity bytes, recording it, and returns the trace
// with the final state. The workload mixes small and large sizes on two
// streams, frees blocks used on a side stream (record_stream), completes
// that stream now and then, calls empty_cache, and runs into OOMs.
func recordWorkload(t *testing.T, conf string, capacity uint64, seed uint64, steps int) (*trace.Trace, config.Config, allocator.Stats) {
	t.Helper()
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	gpu, err := sim.NewGPU(sim.Options{Capacity: capacity, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := gpu.NewProcess()
	require.NoError(t, err)
	a, err := allocator.New(proc, cfg, allocator.WithInvariantChecks())
	require.NoError(t, err)

	tr := &trace.Trace{
		Header: trace.Header{Source: "memreplay", AllocatorSettings: cfg.AllocatorSettings(),
			Devices: []trace.Device{{Index: 0, Capacity: capacity}}},
		Stacks: trace.NewStacks(),
	}
	rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	rng := rand.New(rand.NewPCG(seed, 42))
	var live []*allocator.Block
	sizes := []uint64{1, 512, 4000, 65536, mib - 1, mib + 1, 3 * mib, 9 * mib, 12*mib + 77, 40 * mib, 130 * mib}
	for i := 0; i < steps; i++ {
		switch r := rng.IntN(100); {
		case r < 50 || len(live) == 0:
			size := sizes[rng.IntN(len(sizes))] + uint64(rng.IntN(4096))
			stream := allocator.Stream(0)
			if rng.IntN(4) == 0 {
				stream = 5
			}
			b, err := a.Malloc(size, stream)
			if err != nil {
				require.ErrorIs(t, err, allocator.ErrOutOfMemory)
				continue
			}
			live = append(live, b)
		case r < 90:
			k := rng.IntN(len(live))
			b := live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			if rng.IntN(5) == 0 {
				require.NoError(t, rec.RecordStream(b, 9))
			}
			require.NoError(t, a.Free(b))
		case r < 96:
			proc.CompleteEvents(9)
			rec.StreamSync(9)
		default:
			require.NoError(t, rec.EmptyCache())
		}
	}
	rec.Stop()
	tr.Final = replay.SnapshotSegments(a.Snapshot())
	tr.HasFinal = true
	return tr, cfg, a.Stats()
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

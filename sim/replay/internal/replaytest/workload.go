// Package replaytest holds what the tests of sim/replay and of its device
// backends (sim/replay/realgpu) share: a random recorded workload.
package replaytest

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

const mib = 1 << 20

// RecordWorkload runs a random workload on a fresh allocator with conf on a
// simulated GPU of capacity bytes and records it (replay.Record), with its
// end state. The workload mixes small and large sizes on streams 0 and 5,
// frees blocks used on one of sideStreams (record_stream; default: stream
// 9), completes a side stream now and then (each apart), calls empty_cache,
// and runs into OOMs; blocks of the side streams may still wait at the
// end. It returns the trace, the settings and the recording allocator's
// statistics.
func RecordWorkload(t testing.TB, conf string, capacity, seed uint64, steps int, sideStreams ...allocator.Stream) (*trace.Trace, config.Config, allocator.Stats) {
	t.Helper()
	if len(sideStreams) == 0 {
		sideStreams = []allocator.Stream{9}
	}
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	card, err := gpu.New(gpu.Options{Capacity: capacity, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
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
	side := func() allocator.Stream { return sideStreams[rng.IntN(len(sideStreams))] }
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
				require.NoError(t, rec.RecordStream(b, side()))
			}
			require.NoError(t, a.Free(b))
		case r < 96:
			s := side()
			proc.CompleteEvents(s)
			rec.StreamSync(s)
		default:
			require.NoError(t, rec.EmptyCache())
		}
	}
	rec.Stop()
	tr.Final = replay.SnapshotSegments(a.Snapshot())
	tr.HasFinal = true
	return tr, cfg, a.Stats()
}

// RecordTwoDevices records a workload of two devices, each with its own
// allocator under PyTorch's defaults on a simulated GPU of 1 GiB, into one
// trace with their events interleaved (mallocs of sizes up to 200 MiB,
// frees of the oldest block, OOMs skipped), with the end state of both. It
// returns the trace and each recording allocator's statistics.
func RecordTwoDevices(t testing.TB) (*trace.Trace, [2]allocator.Stats) {
	t.Helper()
	const gib = 1 << 30
	cfg := config.Default()
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", AllocatorSettings: cfg.AllocatorSettings()}, Stacks: trace.NewStacks()}
	var allocs [2]*allocator.Allocator
	for d := range allocs {
		card, err := gpu.New(gpu.Options{Capacity: gib, NoContextOverhead: true})
		require.NoError(t, err)
		proc, err := card.NewProcess()
		require.NoError(t, err)
		allocs[d], err = allocator.New(proc, cfg, allocator.WithDeviceIndex(d))
		require.NoError(t, err)
		replay.Record(allocs[d], int32(d), func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
		tr.Header.Devices = append(tr.Header.Devices, trace.Device{Index: int32(d), Capacity: gib})
	}
	var live [2][]*allocator.Block
	for i := 0; i < 400; i++ {
		d := i % 2
		if i%5 == 4 && len(live[d]) > 0 {
			require.NoError(t, allocs[d].Free(live[d][0]))
			live[d] = live[d][1:]
			continue
		}
		b, err := allocs[d].Malloc(uint64(1+i*d)*(3*mib)%(200*mib)+512, 0)
		if errors.Is(err, allocator.ErrOutOfMemory) {
			continue
		}
		require.NoError(t, err)
		live[d] = append(live[d], b)
	}
	for d := range allocs {
		tr.Final = append(tr.Final, replay.SnapshotSegments(allocs[d].Snapshot())...)
	}
	tr.HasFinal = true
	return tr, [2]allocator.Stats{allocs[0].Stats(), allocs[1].Stats()}
}

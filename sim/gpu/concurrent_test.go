package gpu_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// TestConcurrentProcesses runs several processes at once on one GPU, each
// from its own goroutine, as PAR trials do. Run with -race. Every worker
// first takes a share of the memory and, once all have, finds that a large
// segment no longer fits: they see each other's memory whatever the
// scheduling. Then they churn concurrently, and the shared accounting must
// come out exact.
func TestConcurrentProcesses(t *testing.T) {
	const workers = 8
	g := newGPU(t, 64*miB)
	procs := make([]*gpu.Process, workers)
	for i := range procs {
		procs[i] = newProcess(t, g)
	}
	var wg, holding, probed sync.WaitGroup
	holding.Add(workers)
	probed.Add(workers)
	ooms := make([]int, workers)
	errs := make([]error, workers)
	for i, p := range procs {
		wg.Go(func() {
			errs[i] = share(p, &holding, &probed)
			if errs[i] == nil {
				errs[i] = churn(p, i, &ooms[i])
			}
		})
	}
	// Watch the shared counters while the workers run.
	wg.Go(func() {
		for range 200 {
			if used := g.Used(); used > g.Capacity() {
				errs[0] = errors.New("over capacity")
			}
			_ = g.Counters()
			_ = g.Processes()
		}
	})
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}

	total := workers // the probes
	for _, n := range ooms {
		total += n
	}
	assert.Equal(t, uint64(0), g.Used(), "every worker freed everything")
	assert.Empty(t, g.Processes())
	assert.Equal(t, uint64(workers*302), g.Counters().Get(gpu.CallMalloc).Calls)
	assert.Equal(t, uint64(total), g.Counters().Get(gpu.CallMalloc).Failures)
}

// share holds 6 MiB until every worker does, then checks that 20 MiB no
// longer fits (8 x 6 MiB of 64 MiB are held), and lets go once every worker
// has checked.
func share(p *gpu.Process, holding, probed *sync.WaitGroup) error {
	ballast, err := p.Malloc(6 * miB)
	holding.Done()
	if err != nil {
		probed.Done()
		return err
	}
	holding.Wait()
	_, err = p.Malloc(20 * miB)
	probed.Done()
	if !errors.Is(err, allocator.ErrDeviceOutOfMemory) {
		return errors.Join(errors.New("20 MiB fit beside 48 MiB held by the others"), err)
	}
	probed.Wait()
	return p.Free(ballast)
}

// churn allocates and frees in a pattern of its own, keeping at most four
// segments, and counts the out-of-memory failures it sees.
func churn(p *gpu.Process, seed int, ooms *int) error {
	var live []uint64
	for i := range 300 {
		size := uint64((seed+i)%4+1) * 2 * miB
		addr, err := p.Malloc(size)
		switch {
		case errors.Is(err, allocator.ErrDeviceOutOfMemory):
			*ooms++
		case err != nil:
			return err
		default:
			live = append(live, addr)
		}
		if _, _, err := p.MemGetInfo(); err != nil {
			return err
		}
		e, err := p.RecordEvent(allocator.Stream(seed))
		if err != nil {
			return err
		}
		p.CompleteEvents(allocator.Stream(seed))
		if done, err := p.QueryEvent(e); err != nil || !done {
			return errors.Join(err, errors.New("event not complete"))
		}
		if len(live) == 4 || (i%3 == 0 && len(live) > 0) {
			if err := p.Free(live[0]); err != nil {
				return err
			}
			live = live[1:]
		}
	}
	for _, a := range live {
		if err := p.Free(a); err != nil {
			return err
		}
	}
	return p.Close()
}

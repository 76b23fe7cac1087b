package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/placement"
	"github.com/memreplay/memreplay/trace"
)

// traceBuffers turns one device's blocks of a trace into placement
// buffers: alloc at event i .. free_completed at event j is [i+1, j+1);
// the blocks alive before the first event (recorded, or reconstructed for
// a partial trace) start at 0 and blocks never freed end after the last
// event. Sizes are rounded up to PyTorch's 512-byte block granule, so the
// lower bound is the trace's peak allocated bytes. device -1 picks the
// only device with blocks.
func traceBuffers(path string, device int32) ([]placement.Buffer, error) {
	o, err := openTrace(path)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	r := o.Reader
	type open struct {
		id    string
		lower int64
		size  uint64
	}
	type key struct {
		dev  int32
		addr uint64
	}
	live := map[key]open{}
	byDev := map[int32][]placement.Buffer{}
	round := func(n uint64) uint64 {
		return max(allocator.MinBlockSize, (n+allocator.MinBlockSize-1)/allocator.MinBlockSize*allocator.MinBlockSize)
	}
	init, _ := r.Initial()
	for _, s := range init {
		for _, b := range s.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			live[key{s.Device, b.Address}] = open{fmt.Sprintf("initial-0x%x", b.Address), 0, round(b.Size)}
		}
	}
	var i int64
	err = eachEvent(r, func(e *trace.Event) error {
		i++
		k := key{e.Device, e.Addr}
		switch e.Action {
		case trace.ActionAlloc:
			live[k] = open{fmt.Sprint(i - 1), i, round(e.Size)}
		case trace.ActionFreeCompleted:
			if b, ok := live[k]; ok {
				delete(live, k)
				byDev[e.Device] = append(byDev[e.Device], placement.Buffer{ID: b.id, Lower: b.lower, Upper: i, Size: b.size})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, b := range live {
		byDev[k.dev] = append(byDev[k.dev], placement.Buffer{ID: b.id, Lower: b.lower, Upper: i + 1, Size: b.size})
	}
	devs := make([]int32, 0, len(byDev))
	for d, bs := range byDev {
		if len(bs) > 0 {
			devs = append(devs, d)
		}
	}
	slices.Sort(devs)
	switch {
	case device >= 0 && len(byDev[device]) == 0:
		return nil, usageError{fmt.Errorf("--device %d: %s has no blocks on it (devices with blocks: %v)", device, path, devs)}
	case device < 0 && len(devs) > 1:
		return nil, usageError{fmt.Errorf("%s has blocks on devices %v: pick one with --device", path, devs)}
	case device < 0 && len(devs) == 0:
		return nil, inputError{fmt.Errorf("%s: no blocks to plan", path)}
	case device < 0:
		device = devs[0]
	}
	bufs := byDev[device]
	// In the order of their start, the order a reader of the CSV expects.
	slices.SortFunc(bufs, func(a, b placement.Buffer) int {
		return cmp.Or(cmp.Compare(a.Lower, b.Lower), cmp.Compare(a.ID, b.ID))
	})
	return bufs, nil
}

package cuda

import (
	"fmt"

	"github.com/memreplay/memreplay/allocator"
)

// RecordEvent records an event on stream s (cuEventRecord), taking it from
// the Device's pool or creating one (cuEventCreate, timing disabled as
// PyTorch's are).
func (g *Device) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	g.mu.Lock()
	var e allocator.Event
	if n := len(g.pool); n > 0 {
		e, g.pool = g.pool[n-1], g.pool[:n-1]
	}
	g.mu.Unlock()
	if e == 0 {
		h, _, err := g.call(opEventCreate, 0, 0, 0)
		if err != nil {
			return 0, err
		}
		e = allocator.Event(h)
	}
	if _, _, err := g.call(opEventRecord, uint64(e), uint64(s), 0); err != nil {
		g.recycle(e)
		return 0, err
	}
	return e, nil
}

// QueryEvent is cuEventQuery: CUDA_SUCCESS means complete, and the event
// goes back to the pool; CUDA_ERROR_NOT_READY means not yet.
func (g *Device) QueryEvent(e allocator.Event) (bool, error) {
	g.life.RLock()
	if g.closed {
		g.life.RUnlock()
		return false, fmt.Errorf("cuEventQuery on device %d: %w", g.ordinal, ErrClosed)
	}
	_, _, rc, step := g.lib.do(g.ctx, opEventQuery, uint64(e), 0, 0)
	g.life.RUnlock()
	switch {
	case rc == 0:
		g.recycle(e)
		return true, nil
	case rc == codeNotReady && step == stepCall:
		return false, nil
	}
	return false, g.lib.deviceError(opEventQuery, rc, step)
}

// SynchronizeEvent is cuEventSynchronize; the event then goes back to the
// pool.
func (g *Device) SynchronizeEvent(e allocator.Event) error {
	if _, _, err := g.call(opEventSync, uint64(e), 0, 0); err != nil {
		return err
	}
	g.recycle(e)
	return nil
}

// recycle returns an event to the pool; a recorded event may be recorded
// again (the driver replaces what it captures).
func (g *Device) recycle(e allocator.Event) {
	g.mu.Lock()
	g.pool = append(g.pool, e)
	g.mu.Unlock()
}

package workers

import (
	"fmt"
	"slices"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/trace"
)

// apply makes the request e stands for. Errors from the allocator come back
// as they are (the caller sorts OOMs and sticky errors from bad input); a
// trace that contradicts itself (a free of an address the task does not
// hold) is bad input.
func (w *worker) apply(e *trace.Event) error {
	switch e.Action {
	case trace.ActionAlloc:
		if w.live.find(e.Addr) >= 0 {
			return fmt.Errorf("alloc at %#x, which the trial already holds", e.Addr)
		}
		b, err := w.a.Malloc(e.Size, allocator.Stream(e.Stream))
		if err != nil {
			return err
		}
		w.live.insert(e.Addr, b)
		w.hold(b.RequestedSize())
	case trace.ActionFreeRequested:
		i := w.live.find(e.Addr)
		if i < 0 {
			return fmt.Errorf("free of unknown address %#x", e.Addr)
		}
		st := w.live.streamsOf(i)
		if st != nil && st.freed {
			return fmt.Errorf("double free of %#x", e.Addr)
		}
		// Read before the Free: a stitched block is recycled when its
		// free completes (allocator/slab.go).
		b := w.live.block(i)
		n := b.RequestedSize()
		if err := w.a.Free(b); err != nil {
			return err
		}
		w.drop(n)
		if st == nil || len(st.streams) == 0 {
			w.live.removeAt(i)
			return nil
		}
		// Back in its pool once the streams it was used on catch up:
		// the trace's free_completed says when.
		st.freed = true
	case trace.ActionFreeCompleted:
		i := w.live.find(e.Addr)
		if i < 0 {
			return nil // returned at its request already
		}
		st := w.live.streamsOf(i)
		if st == nil || !st.freed {
			return fmt.Errorf("free_completed of %#x, which was not freed", e.Addr)
		}
		w.live.removeAt(i)
		for _, s := range st.streams {
			w.proc.CompleteEvents(s)
		}
		return w.a.ProcessEvents()
	case trace.ActionRecordStream:
		i := w.live.find(e.Addr)
		if i < 0 {
			return fmt.Errorf("record_stream of %#x, which is not allocated", e.Addr)
		}
		if st := w.live.streamsOf(i); st != nil && st.freed {
			return fmt.Errorf("record_stream of %#x, which is not allocated", e.Addr)
		}
		s := allocator.Stream(e.Stream)
		if err := w.a.RecordStream(w.live.block(i), s); err != nil {
			return err
		}
		w.live.addStream(i, s)
	case trace.ActionEmptyCache:
		return w.a.EmptyCache()
	case trace.ActionStreamSync:
		w.proc.CompleteEvents(allocator.Stream(e.Stream))
	}
	// trial_start/trial_end bracket the task; markers annotate; segment_*
	// and oom entries are the recording allocator's decisions, which this
	// allocator makes for itself.
	return nil
}

// releaseAll frees every block the task still holds, in address order so
// that the allocator's state after it does not depend on map order. Blocks
// waiting for their streams are let go: the trial is over, so is its work.
func (w *worker) releaseAll() error {
	if w.live.len() == 0 {
		return nil
	}
	addrs := w.live.appendAddrs(make([]uint64, 0, w.live.len()))
	slices.Sort(addrs)
	waited := false
	for _, addr := range addrs {
		i := w.live.find(addr)
		b, st := w.live.block(i), w.live.streamsOf(i)
		w.live.removeAt(i)
		var streams []allocator.Stream
		if st != nil {
			streams = st.streams
		}
		if st != nil && st.freed {
			for _, s := range streams {
				w.proc.CompleteEvents(s)
			}
			waited = true
			continue
		}
		// Read before the Free: a stitched block is recycled when its
		// free completes (allocator/slab.go).
		n := b.RequestedSize()
		if err := w.a.Free(b); err != nil {
			return err
		}
		w.drop(n)
		if len(streams) > 0 {
			for _, s := range streams {
				w.proc.CompleteEvents(s)
			}
			waited = true
		}
	}
	if waited {
		return w.a.ProcessEvents()
	}
	return nil
}

// hold and drop keep the live-byte sums (the worker's and the run's).
func (w *worker) hold(n uint64) {
	w.liveBytes += n
	w.r.live += n
	if w.r.live > w.r.sum.PeakLive {
		w.r.sum.PeakLive = w.r.live
	}
}

func (w *worker) drop(n uint64) {
	w.liveBytes -= n
	w.r.live -= n
}

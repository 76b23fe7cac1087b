package allocator

import "sort"

// DeviceCachingAllocator::free (the request) is in Free (allocator.go),
// written out there rather than called: allocation and allocated_bytes
// drop now; the block returns to its pool now, or after the events of the
// streams that used it (2.6).

// freeBlock returns a block to its pool: merge with the previous neighbour,
// then the next, insert, and settle active and inactive_split (free_block).
// inactive_split moves by the net change only, as in PyTorch, which shows in
// its allocated/freed totals.
func (a *Allocator) freeBlock(b *Block) error {
	a.record(ActionFreeCompleted, b.addr, b.requested, b.stream)
	// Only Stitch makes stitched segments: under the other policies a free
	// does not read its segment (a cache miss in nearly half the frees of
	// the replay benchmark).
	if a.stitch != nil && b.seg.stitch != nil {
		// A stitched block is its range's only block: the range goes.
		pi := b.pool.statIdx
		a.stats.Active.decrease(pi, 1)
		a.stats.ActiveBytes.decrease(pi, int64(b.size))
		a.stats.RequestedBytes.decrease(pi, int64(b.requested))
		return a.unstitch(b)
	}
	origSize := b.size
	requested := b.requested
	var netBlocks, netBytes int64
	// tryMerge's test, here so that a neighbour that cannot merge costs
	// no call; written out for each neighbour, since a loop over the
	// two built them an array on the stack (27 instructions a free).
	if c := b.prev; c.allocatable() && c.mapped == b.mapped {
		netBlocks--
		netBytes -= int64(a.merge(b, c))
	}
	if c := b.next; c.allocatable() && c.mapped == b.mapped {
		netBlocks--
		netBytes -= int64(a.merge(b, c))
	}
	insertFree(b)
	if b.isSplit() {
		netBlocks++
		netBytes += int64(b.size)
	}
	st := &a.stats
	pi := b.pool.statIdx
	if !b.expandable() {
		if netBlocks > 0 {
			st.InactiveSplit.increase(pi, netBlocks)
		} else if netBlocks < 0 {
			st.InactiveSplit.decrease(pi, -netBlocks)
		}
		if netBytes > 0 {
			st.InactiveSplitBytes.increase(pi, netBytes)
		} else if netBytes < 0 {
			st.InactiveSplitBytes.decrease(pi, -netBytes)
		}
	}
	st.Active.decrease(pi, 1)
	st.ActiveBytes.decrease(pi, int64(origSize))
	st.RequestedBytes.decrease(pi, int64(requested))
	if b.pool.long {
		return a.releaseLong(b)
	}
	if a.plan != nil && b.seg == a.plan.former {
		return a.plan.releaseFormer(a, b)
	}
	return nil
}

// tryMerge merges src into dst when src is a free, idle neighbour in the
// same mapped state, and returns the bytes merged (try_merge_blocks). dst
// keeps the lower address if src came first.
func (a *Allocator) tryMerge(dst, src *Block) uint64 {
	if !src.allocatable() || dst.mapped != src.mapped {
		return 0
	}
	return a.merge(dst, src)
}

// merge merges src, which tryMerge checked, into dst.
func (a *Allocator) merge(dst, src *Block) uint64 {
	if dst.prev == src {
		dst.addr = src.addr
		dst.prev = src.prev
		if dst.prev != nil {
			dst.prev.next = dst
		} else {
			dst.seg.head = dst
		}
	} else {
		dst.next = src.next
		if dst.next != nil {
			dst.next.prev = dst
		}
	}
	if src.mapped {
		src.pool.free.remove(src)
	} else {
		src.pool.unmapped.remove(src)
	}
	dst.size += src.size
	sub := src.size
	a.recycle(src)
	return sub
}

// eventQueue is one stream's recorded events in order, with the blocks they
// hold back.
type eventQueue struct {
	q    []pendingEvent
	head int
}

type pendingEvent struct {
	ev Event
	b  *Block
}

// insertEvents records one event on each stream that used b (insert_events).
// Streams are taken in ascending order so that replays are deterministic
// (PyTorch walks a hash set).
func (a *Allocator) insertEvents(b *Block) error {
	uses := *b.streamUses
	b.streamUses = nil
	sort.Slice(uses, func(i, j int) bool { return uses[i] < uses[j] })
	for _, s := range uses {
		ev, err := a.dev.RecordEvent(s)
		if err != nil {
			return err
		}
		b.eventCount++
		q := a.events[s]
		if q == nil {
			q = &eventQueue{}
			a.events[s] = q
			i := sort.Search(len(a.eventStreams), func(i int) bool { return a.eventStreams[i] >= s })
			a.eventStreams = append(a.eventStreams, 0)
			copy(a.eventStreams[i+1:], a.eventStreams[i:])
			a.eventStreams[i] = s
		}
		q.q = append(q.q, pendingEvent{ev, b})
		a.pendingEvents++
	}
	return nil
}

// processEvents pops completed events stream by stream, stopping at the
// first incomplete one on each, and frees the blocks whose last event
// completed (process_events).
func (a *Allocator) processEvents() error {
	for i := 0; i < len(a.eventStreams); {
		s := a.eventStreams[i]
		q := a.events[s]
		for q.head < len(q.q) {
			e := q.q[q.head]
			done, err := a.dev.QueryEvent(e.ev)
			if err != nil {
				return err
			}
			if !done {
				break
			}
			q.q[q.head] = pendingEvent{}
			q.head++
			a.pendingEvents--
			if err := a.eventDone(e.b); err != nil {
				return err
			}
		}
		if q.head == len(q.q) {
			delete(a.events, s)
			a.eventStreams = append(a.eventStreams[:i], a.eventStreams[i+1:]...)
			continue
		}
		i++
	}
	return nil
}

func (a *Allocator) eventDone(b *Block) error {
	b.eventCount--
	if b.eventCount == 0 {
		return a.freeBlock(b)
	}
	return nil
}

// synchronizeAndFreeEvents waits for every outstanding event and frees the
// blocks they held (synchronize_and_free_events).
func (a *Allocator) synchronizeAndFreeEvents() error {
	a.stats.NumSyncAllStreams++
	for len(a.eventStreams) > 0 {
		s := a.eventStreams[0]
		q := a.events[s]
		for q.head < len(q.q) {
			e := q.q[q.head]
			if err := a.dev.SynchronizeEvent(e.ev); err != nil {
				return err
			}
			q.q[q.head] = pendingEvent{}
			q.head++
			a.pendingEvents--
			if err := a.eventDone(e.b); err != nil {
				return err
			}
		}
		delete(a.events, s)
		a.eventStreams = a.eventStreams[1:]
	}
	return nil
}

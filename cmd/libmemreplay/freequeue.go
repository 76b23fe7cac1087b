//go:build cgo

package main

// Deferred frees: memreplay_free without entering Go.
//
// Each call from C into Go costs about 60 ns (cgo's callback path), as
// much as half a cached malloc+free pair. memreplay_free returns nothing,
// so it need not enter Go at once: shim.c pushes the pointer into a ring
// in C memory (freequeue.h) and returns, and the next call into Go from
// any thread — a malloc, or any other entry point — applies the queued
// frees first, oldest first. A thread's free and its next malloc then
// cost one crossing instead of two.
//
// Order. The allocator must make the decisions of some order of the calls
// that keeps each thread's own order: a thread that frees p and then
// mallocs must have p back in the pool before its malloc. Each entry point
// calls drain first, which reads the tail (the tickets handed out so far)
// and returns at once if done, the count of entries applied, has reached
// it. Otherwise it takes qmu, the queue's one consumer lock, and applies
// the entries up to that tail: for each, it reads the slot, applies the
// free (under the lock of the block's device, device.mu), and only then
// advances done (which also hands the slot back to the pushers). So an
// entry that another thread has taken out of the ring but not yet applied
// still counts as pending, and the caller waits on qmu until it is
// applied: thread A cannot take thread B's free and apply it after B's
// malloc. Frees are applied in ticket order, which is each thread's order
// (a thread's pushes take increasing tickets).
//
// One lock for the frees and the malloc. A malloc that finds frees
// pending (lockDrained) takes qmu and then its own device's lock, applies
// the frees, releases qmu and keeps the device's lock for its own malloc:
// in the usual pair (one device, the free of the block the malloc reuses)
// that is one device lock for both, where the frees took it apart before.
// A queued free of another device takes that device's lock as well, while
// holding the first: two device locks are only ever held together by the
// holder of qmu, so no two threads wait on each other's. Lock order: qmu,
// then devices; nothing that holds a device's lock waits for qmu.
//
// A push claims a ticket before it writes its slot; a drain that meets a
// claimed slot not yet written waits for it (the pusher is a few
// instructions from done, unless the OS has preempted it), since an entry
// behind it may be the caller's own.
//
// Everything that could see a free as not yet applied drains first:
// malloc, free (a full ring, or no queue), record_stream, empty_cache,
// set_memory_fraction, init, stats, write_trace, write_snapshot, and
// last_error, so that a double free or an unknown pointer queued by
// memreplay_free is in last_error (and on stderr) by the time the caller
// asks. The error is reported by whichever call applied the free.
//
// Bounds. The ring holds MR_FQ_LEN entries; a push into a full ring fails
// and memreplay_free enters Go, which drains the ring and then applies its
// own free.
//
// Other streams. Freeing a block used on other streams (record_stream)
// records an event on each, which must cover the work queued up to the
// free, as PyTorch's does, and not what was queued after (the block would
// come back later, and the decisions differ). The library counts the live
// blocks with such a use in C memory (streamed); while it is not zero,
// memreplay_free enters Go and the free is applied at its call
// (mr_fq_defer).
//
// Recording (MEMREPLAY_TRACE, MEMREPLAY_RECORD=1) keeps no queue: every
// free is applied at its call, so each recorded event keeps the time of
// its call. Without a queue (recording, or no memory for the ring) drain
// costs a nil check.

/*
#include <sched.h>
#include "freequeue.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// fqLen is the ring's size (MR_FQ_LEN).
const fqLen = C.MR_FQ_LEN

// freeQueue is a ring of deferred frees in C memory.
type freeQueue struct {
	c          *C.struct_mr_fq
	tail, done *atomic.Uint64 // c's counters
}

// newFreeQueue allocates a ring; nil if C's calloc fails, and the library
// then applies every free at its call.
func newFreeQueue() *freeQueue {
	c := C.mr_fq_new()
	if c == nil {
		return nil
	}
	return &freeQueue{c: c, tail: (*atomic.Uint64)(unsafe.Pointer(&c.tail)), done: (*atomic.Uint64)(unsafe.Pointer(&c.done))}
}

// publish makes q the ring memreplay_free pushes into.
func (q *freeQueue) publish() { C.mr_fq_publish(q.c) }

// queue is memreplay_free's whole choice (mr_fq_defer), for the in-process
// tests: false if p's free must be applied now.
func (q *freeQueue) queue(p uintptr, dev int) bool {
	return C.mr_fq_defer(q.c, C.uint64_t(p), C.int64_t(dev)) != 0
}

// noteStreamed counts a live block that gained a use on another stream
// (+1), or was freed with one (-1): while any is live, memreplay_free
// applies frees at their call (mr_fq_defer).
func (l *library) noteStreamed(delta int64) {
	if q := l.q; q != nil {
		atomic.AddUint64((*uint64)(unsafe.Pointer(&q.c.streamed)), uint64(delta))
	}
}

// claim and fill are mr_fq_push's two steps, for the tests to stop a push
// between them: claim returns the ticket (-1 if the ring is full).
func (q *freeQueue) claim() int64 { return int64(C.mr_fq_claim(q.c)) }
func (q *freeQueue) fill(t int64, p uintptr, dev int) {
	C.mr_fq_fill(q.c, C.uint64_t(t), C.uint64_t(p), C.int64_t(dev))
}

// release frees the ring's memory. Nothing may push into it any more (the
// tests' libraries; the global one is never closed).
func (q *freeQueue) release() {
	C.free(unsafe.Pointer(q.c))
	q.c = nil
}

// pending is how many queued frees are not yet applied.
func (q *freeQueue) pending() uint64 {
	return q.tail.Load() - q.done.Load()
}

// drain applies the frees queued before this call, in order (see the top
// of the file). Every entry point calls it first, or lockDrained.
func (l *library) drain() {
	// tail first: done never passes tail, so done == upto means every
	// entry before upto, the caller's own among them, has been applied.
	if q := l.q; q != nil {
		if upto := q.tail.Load(); q.done.Load() < upto {
			l.qmu.Lock()
			l.drainTo(q, upto, nil)
		}
	}
}

// lockDrained is drain for a call on device d: it returns holding d.mu,
// with the frees queued before the call applied, and frees applied on d
// under that same hold (see the top of the file).
func (l *library) lockDrained(d *device) {
	if q := l.q; q != nil {
		if upto := q.tail.Load(); q.done.Load() < upto {
			l.qmu.Lock()
			d.mu.Lock()
			l.drainTo(q, upto, d)
			return
		}
	}
	d.mu.Lock()
}

// drainTo applies the entries up to upto, holding qmu, which it releases;
// held is a device whose lock the caller holds (and keeps), or nil.
func (l *library) drainTo(q *freeQueue, upto uint64, held *device) {
	head := q.done.Load()
	// A panic while applying a free (a bug) is reported as memreplay_free
	// reports its own, the entry counts as applied, and the rest stay
	// queued for the next call. One deferred function per drain, not per
	// entry. A device lock taken for one entry is released by a deferred
	// call of its own (release); held stays the caller's.
	defer func() {
		if r := recover(); r != nil {
			q.done.Store(head + 1)
			l.fail(fmt.Errorf("internal error in memreplay_free: %v", r))
		}
		l.qmu.Unlock()
	}()
	for ; head < upto; head++ {
		s := &q.c.slot[head&(fqLen-1)]
		seq := (*uint64)(unsafe.Pointer(&s.seq))
		for spin := 0; atomic.LoadUint64(seq) != head+1; spin++ {
			// Claimed, not yet written: the pusher is between its
			// compare-and-swap and its store.
			if spin >= 64 {
				C.sched_yield()
			}
		}
		p := uintptr(atomic.LoadUint64((*uint64)(unsafe.Pointer(&s.ptr))))
		dev := int(atomic.LoadInt64((*int64)(unsafe.Pointer(&s.dev))))
		if l.applyHook != nil {
			l.applyHook(p)
		}
		l.release(p, dev, held)
		q.done.Store(head + 1) // applied, and the slot is free for the next lap
	}
}

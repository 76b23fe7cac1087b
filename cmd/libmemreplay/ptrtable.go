package main

import (
	"sync"

	"github.com/memreplay/memreplay/allocator"
)

// ptrTable maps the pointers memreplay_malloc handed out to their blocks:
// memreplay_free and memreplay_record_stream receive only the raw pointer.
// PyTorch calls from many threads (the Python thread, autograd's device
// threads, DataLoader pin threads), so the table is split into shards by
// a hash of the address, each with its own mutex and map, and two threads
// rarely meet on one lock.
type ptrTable struct {
	shards [ptrShards]ptrShard
}

const ptrShards = 64

type ptrShard struct {
	mu sync.Mutex
	m  map[uintptr]ptrEntry
	_  [48]byte // one shard per 64-byte cache line: mutex 8, map 8, padding 48
}

type ptrEntry struct {
	b *allocator.Block
	d *device
}

func (t *ptrTable) init() {
	for i := range t.shards {
		t.shards[i].m = make(map[uintptr]ptrEntry, 64)
	}
}

// shard picks a shard by a multiplicative hash of the address: blocks are
// at least 512-byte aligned, so the low bits carry nothing.
func (t *ptrTable) shard(p uintptr) *ptrShard {
	return &t.shards[(uint64(p)>>9)*0x9E3779B97F4A7C15>>58]
}

// put adds p; false if p was already there (an allocator bug), in which
// case the entry is replaced.
func (t *ptrTable) put(p uintptr, e ptrEntry) bool {
	s := t.shard(p)
	s.mu.Lock()
	_, dup := s.m[p]
	s.m[p] = e
	s.mu.Unlock()
	return !dup
}

// take removes p and returns its entry.
func (t *ptrTable) take(p uintptr) (ptrEntry, bool) {
	s := t.shard(p)
	s.mu.Lock()
	e, ok := s.m[p]
	if ok {
		delete(s.m, p)
	}
	s.mu.Unlock()
	return e, ok
}

// get returns p's entry.
func (t *ptrTable) get(p uintptr) (ptrEntry, bool) {
	s := t.shard(p)
	s.mu.Lock()
	e, ok := s.m[p]
	s.mu.Unlock()
	return e, ok
}

// with runs fn holding p's shard lock, if p still maps to b (a concurrent
// free and malloc may have reused the address since get).
func (t *ptrTable) with(p uintptr, b *allocator.Block, fn func() error) error {
	s := t.shard(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[p]; !ok || e.b != b {
		return errFreedMeanwhile
	}
	return fn()
}

// len counts the live pointers.
func (t *ptrTable) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

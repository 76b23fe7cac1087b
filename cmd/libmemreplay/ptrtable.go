package main

import (
	"sync"

	"github.com/memreplay/memreplay/allocator"
)

// ptrTable maps the pointers memreplay_malloc handed out to their blocks:
// memreplay_free and memreplay_record_stream receive only the raw pointer.
// PyTorch calls from many threads (the Python thread, autograd's device
// threads, DataLoader pin threads), so the table is split into shards by
// a hash of the address, each with its own mutex, and two threads rarely
// meet on one lock.
//
// A shard is an open-addressing hash table (linear probing, deletion by
// backward shift) rather than a Go map: a pair costs one probe to insert
// and one to remove, where the map took a lookup and an assignment, then a
// lookup and a delete, each hashing the key again; that was about 60 ns of
// a ~270 ns pair through the C ABI (BenchmarkExportedPair,
// docs/performance.md).
type ptrTable struct {
	shards [ptrShards]ptrShard
}

const (
	ptrShardBits = 6
	ptrShards    = 1 << ptrShardBits
	// ptrShardMin is a shard's first size, in slots (a power of two).
	ptrShardMin = 64
)

type ptrShard struct {
	mu    sync.Mutex
	keys  []uintptr // pointer+1; 0: an empty slot
	vals  []ptrEntry
	count int32
	shift uint32 // 64 - log2(len(keys))
	// One shard per 64-byte cache line: mutex 8, slices 48, count and
	// shift 8.
}

type ptrEntry struct {
	b *allocator.Block
	d *device
	// streamed: the block has a use on another stream (record_stream),
	// counted in the free queue's streamed (freequeue.go).
	streamed bool
}

func (t *ptrTable) init() {
	for i := range t.shards {
		t.shards[i].resize(ptrShardMin)
	}
}

// hash spreads an address: blocks are at least 512-byte aligned, so the
// low bits carry nothing, and large blocks are 2 MiB aligned, so only the
// product's high bits are used. The top ptrShardBits pick the shard, the
// bits below them the slot.
func hash(p uintptr) uint64 { return (uint64(p) >> 9) * 0x9E3779B97F4A7C15 }

func (t *ptrTable) shard(p uintptr) (*ptrShard, uint64) {
	h := hash(p)
	return &t.shards[h>>(64-ptrShardBits)], h << ptrShardBits
}

// home is the slot a key hashes to.
func (s *ptrShard) home(h uint64) int { return int(h >> s.shift) }

// find returns p's slot, or the empty slot where p would go. The one
// address whose key would be 0 is never in the table (nor handed out: a
// block cannot start at the last byte).
func (s *ptrShard) find(p uintptr, h uint64) (int, bool) {
	mask := len(s.keys) - 1
	k := p + 1
	if k == 0 {
		return -1, false
	}
	for i := s.home(h); ; i = (i + 1) & mask {
		switch s.keys[i] {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (s *ptrShard) resize(n int) {
	keys, vals := s.keys, s.vals
	s.keys, s.vals = make([]uintptr, n), make([]ptrEntry, n)
	s.shift = 64
	for m := n; m > 1; m >>= 1 {
		s.shift--
	}
	for i, k := range keys {
		if k != 0 {
			j, _ := s.find(k-1, hash(k-1)<<ptrShardBits)
			s.keys[j], s.vals[j] = k, vals[i]
		}
	}
}

// remove empties slot i, moving later entries of its probe run back so
// that no lookup stops early at the hole.
func (s *ptrShard) remove(i int) {
	mask := len(s.keys) - 1
	for j := (i + 1) & mask; s.keys[j] != 0; j = (j + 1) & mask {
		h := s.home(hash(s.keys[j]-1) << ptrShardBits)
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			s.keys[i], s.vals[i] = s.keys[j], s.vals[j]
			i = j
		}
	}
	s.keys[i], s.vals[i] = 0, ptrEntry{}
	s.count--
}

// put adds p; false if p was already there (an allocator bug), in which
// case the entry is replaced.
func (t *ptrTable) put(p uintptr, e ptrEntry) bool {
	s, h := t.shard(p)
	s.mu.Lock()
	i, dup := s.find(p, h)
	if i < 0 {
		s.mu.Unlock()
		return true // not kept: no free can name it either
	}
	if !dup {
		if 4*(int(s.count)+1) > 3*len(s.keys) {
			s.resize(2 * len(s.keys))
			i, _ = s.find(p, h)
		}
		s.keys[i] = p + 1
		s.count++
	}
	s.vals[i] = e
	s.mu.Unlock()
	return !dup
}

// take removes p and returns its entry.
func (t *ptrTable) take(p uintptr) (ptrEntry, bool) {
	s, h := t.shard(p)
	s.mu.Lock()
	i, ok := s.find(p, h)
	var e ptrEntry
	if ok {
		e = s.vals[i]
		s.remove(i)
	}
	s.mu.Unlock()
	return e, ok
}

// get returns p's entry.
func (t *ptrTable) get(p uintptr) (ptrEntry, bool) {
	s, h := t.shard(p)
	s.mu.Lock()
	i, ok := s.find(p, h)
	var e ptrEntry
	if ok {
		e = s.vals[i]
	}
	s.mu.Unlock()
	return e, ok
}

// with runs fn on p's entry holding p's shard lock, if p still maps to b
// (a concurrent free and malloc may have reused the address since get).
func (t *ptrTable) with(p uintptr, b *allocator.Block, fn func(e *ptrEntry) error) error {
	s, h := t.shard(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.find(p, h)
	if !ok || s.vals[i].b != b {
		return errFreedMeanwhile
	}
	return fn(&s.vals[i])
}

// len counts the live pointers.
func (t *ptrTable) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += int(s.count)
		s.mu.Unlock()
	}
	return n
}

package allocator

import "math/bits"

// bucketTable finds a free set's bucket by its exact key in one probe or
// two: the question of every block that goes back to its pool at a new
// size (after a split or a merge), and of a best-fit search whose place
// the index no longer remembers (bucketIndex.first; asking the table
// first cost every search a probe, and in the replay benchmark's trace no
// search found a bucket of its exact size). The ordered index answers it
// too, with two binary searches whose branches a processor cannot
// predict; this answers it without.
//
// Open addressing with linear probing, at most half full. Buckets enter it
// when the free set makes them and leave it only when the free set sweeps
// its empty buckets out, which rebuilds the table: so there is no deletion.
// bucketTableKeep is the size (in slots, 8 bytes each) up to which reset
// keeps a table however few buckets remain: clearing it costs less than
// growing a new one back.
const bucketTableKeep = 4096

type bucketTable struct {
	slots []*bucket
	n     int
	shift uint8
}

func (t *bucketTable) home(k bkey) int {
	h := (k.size>>9 ^ uint64(k.stream)*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
	return int(h >> t.shift)
}

// get returns the bucket of k, or nil.
func (t *bucketTable) get(k bkey) *bucket {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		bk := t.slots[i]
		if bk == nil || bk.key == k {
			return bk
		}
	}
}

// add puts bk, whose key must not be in the table.
func (t *bucketTable) add(bk *bucket) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(2*len(t.slots), 16))
	}
	t.place(bk)
	t.n++
}

func (t *bucketTable) place(bk *bucket) {
	mask := len(t.slots) - 1
	i := t.home(bk.key)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = bk
}

// resize empties the table into size slots and puts its buckets back.

func (t *bucketTable) resize(size int) {
	old := t.slots
	t.slots = make([]*bucket, size)
	t.shift = uint8(64 - bits.Len(uint(size-1)))
	for _, bk := range old {
		if bk != nil {
			t.place(bk)
		}
	}
}

// reset empties the table, keeping room for n buckets. The table it has is
// cleared and kept unless it is both large and over four times what n
// needs: a sweep empties the index, and in a training loop the sizes it
// swept come back before the next sweep, so a table shrunk to fit grew
// again through every doubling (a 25 M-event replay made and dropped
// 273,000 tables, 260 MB, which doubled its peak heap through the
// collector's pacing).
func (t *bucketTable) reset(n int) {
	size := 16
	for 2*n > size {
		size *= 2
	}
	if size > len(t.slots) || len(t.slots) > max(4*size, bucketTableKeep) {
		t.slots = make([]*bucket, size)
		t.shift = uint8(64 - bits.Len(uint(size-1)))
	} else {
		clear(t.slots)
	}
	t.n = 0
}

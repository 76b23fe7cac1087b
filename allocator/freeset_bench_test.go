package allocator

import (
	"testing"

	"github.com/google/btree"
)

// BenchmarkBTreeBaseline is the design alternative the free set replaced: one
// B-tree keyed by (stream, size, address) holding 10,000 free blocks, with
// the lower bound, delete and insert a cache hit needs. docs/allocator.md
// compares it with BenchmarkMallocFreeCacheHit.
func BenchmarkBTreeBaseline(b *testing.B) {
	type item struct{ stream, size, addr uint64 }
	less := func(x, y item) bool {
		if x.stream != y.stream {
			return x.stream < y.stream
		}
		if x.size != y.size {
			return x.size < y.size
		}
		return x.addr < y.addr
	}
	t := btree.NewWithFreeListG(16, less, btree.NewFreeListG[item](64))
	for i := 0; i < 10000; i++ {
		t.ReplaceOrInsert(item{0, uint64(512 * (i%300 + 1)), uint64(i) << 20})
	}
	key := item{0, 512 * 150, 0}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var found item
		t.AscendGreaterOrEqual(key, func(it item) bool { found = it; return false })
		t.Delete(found)
		t.ReplaceOrInsert(found)
	}
}

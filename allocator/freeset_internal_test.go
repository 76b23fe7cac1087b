package allocator

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFreeSetMatchesSortedModel drives the free set with random inserts
// and removes of blocks over few and many (stream, size) keys, so that the
// index splits, merges and drops leaves, and after every step compares
// each query best fit and the release paths use (lower bound, next,
// previous, last, the whole set, the largest size) with a sorted list of
// the same blocks. A third of the removes take one of the blocks inserted
// last, which the set holds outside their buckets (hot), so that the
// queries are asked with none, some and all hot places taken.
func TestFreeSetMatchesSortedModel(t *testing.T) {
	for _, c := range []struct {
		name           string
		streams, sizes int
	}{{"one-key", 1, 1}, {"few", 2, 5}, {"many", 3, 300}, {"many-streams", 400, 2}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(c.sizes)))
			var s freeSet
			var model []*Block // in set order
			setLess := func(a, b *Block) int {
				switch {
				case a.stream != b.stream:
					return cmp.Compare(a.stream, b.stream)
				case a.size != b.size:
					return cmp.Compare(a.size, b.size)
				}
				return cmp.Compare(a.addr, b.addr)
			}
			var nextAddr uint64
			var recent []*Block
			stream := func() Stream { return Stream(rng.IntN(c.streams) * 3) }
			size := func() uint64 { return uint64(rng.IntN(c.sizes)+1) * 512 }
			for step := 0; step < 20000; step++ {
				// Grow to a few thousand blocks, then shrink to none.
				grow := (step/5000)%2 == 0
				if len(model) == 0 || (grow && rng.IntN(10) < 7) || (!grow && rng.IntN(10) < 3) {
					nextAddr += 512 * uint64(1+rng.IntN(3))
					addr := nextAddr
					if rng.IntN(4) == 0 {
						addr = uint64(rng.IntN(1<<30)) << 9 // out of order
					}
					b := &Block{addr: addr, size: size(), stream: stream()}
					if i, dup := slices.BinarySearchFunc(model, b, setLess); !dup {
						s.insert(b)
						model = slices.Insert(model, i, b)
						recent = append(recent[max(0, len(recent)-2*olderCap):], b)
					}
				} else {
					i := rng.IntN(len(model))
					if len(recent) > 0 && rng.IntN(3) == 0 {
						// One of the blocks inserted last, which the set may
						// keep out of their buckets (hot): a split's
						// remainder merged back, the last one most often.
						r := recent[len(recent)-1]
						if rng.IntN(2) == 0 {
							r = recent[rng.IntN(len(recent))]
						}
						if j, ok := slices.BinarySearchFunc(model, r, setLess); ok && model[j] == r {
							i = j
						}
					}
					s.remove(model[i])
					model = slices.Delete(model, i, i+1)
				}
				if err := s.check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				compareFreeSet(t, step, &s, model, stream(), size())
			}
		})
	}
}

func compareFreeSet(t *testing.T, step int, s *freeSet, model []*Block, stream Stream, size uint64) {
	t.Helper()
	if s.len() != len(model) {
		t.Fatalf("step %d: %d blocks, model %d", step, s.len(), len(model))
	}
	at := func(i int) *Block {
		if i < 0 || i >= len(model) {
			return nil
		}
		return model[i]
	}
	// Lower bound of (stream, size, 0), and of a stream the set lacks.
	for _, st := range []Stream{stream, stream + 1} {
		lb := sortSearch(len(model), func(i int) bool {
			b := model[i]
			return b.stream > st || (b.stream == st && b.size >= size)
		})
		if got := s.lowerBound(st, size); got != at(lb) {
			t.Fatalf("step %d: lowerBound(%d, %d) = %v, model %v", step, st, size, got, at(lb))
		}
	}
	if got := s.last(); got != at(len(model)-1) {
		t.Fatalf("step %d: last = %v, model %v", step, got, at(len(model)-1))
	}
	var largest uint64
	for _, b := range model {
		largest = max(largest, b.size)
	}
	if got := s.largest(); got != largest {
		t.Fatalf("step %d: largest %d, model %d", step, got, largest)
	}
	if step%97 == 0 {
		if got := s.appendAll(nil); !slices.Equal(got, model) && len(model) > 0 {
			t.Fatalf("step %d: appendAll differs from the model", step)
		}
		for i, b := range model {
			if !s.contains(b) {
				t.Fatalf("step %d: block %d not contained", step, i)
			}
			if got := s.next(b); got != at(i+1) {
				t.Fatalf("step %d: next of %d is %v, model %v", step, i, got, at(i+1))
			}
			if got := s.prev(b); got != at(i-1) {
				t.Fatalf("step %d: prev of %d is %v, model %v", step, i, got, at(i-1))
			}
		}
	}
}

func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

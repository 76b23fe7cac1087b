package trial

// The generator makes a tensor, a backward node and a few tensor lists per
// event. Allocated one by one they were more than one heap object per
// event, so the garbage collector paced every sweep that runs the model
// (issue 19). They come from chunks instead, which a released reader
// (pool.go) hands to the next trial:
//
//   - tensors are never reused within a trial: a freed tensor's size and
//     gradient are still read through the nodes that took it as an input,
//     so a slot stays valid as long as the trial. A trial longer than the
//     chunks kept makes new ones, which the collector frees with their last
//     user, as before; the next trial starts again at the first kept chunk.
//   - nodes, checkpoint segments and the nodes' lists live only until the
//     backward pass runs them: at the end of every phase the tape is empty
//     (reader.fill checks), so their chunks are rewound and reused phase
//     after phase.

import "sync"

const arenaChunk = 1024

// keptTensorChunks is how many tensor chunks a released reader keeps (a
// BERT-base step of batch 8 makes about four).
const keptTensorChunks = 16

// slab hands out T slots from chunks of arenaChunk; a slot's address never
// changes. rewind makes every slot free again.
type slab[T any] struct {
	chunks [][]T // the chunks kept for reuse, at most keep
	keep   int   // 0: every chunk made
	n      int   // chunks handed out since the rewind, cur the last
	cur    []T
}

func (s *slab[T]) next() *T {
	if len(s.cur) == cap(s.cur) {
		if s.n < len(s.chunks) {
			s.cur = s.chunks[s.n][:0]
		} else {
			s.cur = make([]T, 0, arenaChunk)
			if s.keep == 0 || len(s.chunks) < s.keep {
				s.chunks = append(s.chunks, s.cur)
			}
		}
		s.n++
	}
	s.cur = s.cur[:len(s.cur)+1]
	return &s.cur[len(s.cur)-1]
}

func (s *slab[T]) rewind() { s.n, s.cur = 0, nil }

// scrub drops what the kept chunks' old slots point to, so that a pooled
// reader keeps no dead trial's memory alive.
func (s *slab[T]) scrub() {
	for _, c := range s.chunks {
		clear(c[:cap(c)])
	}
	s.rewind()
}

// listSlab hands out tensor lists from chunks, like slab.
type listSlab struct {
	chunks [][]*tensor
	n      int
	cur    []*tensor
}

// take copies ts into the current chunk; the result has no spare capacity,
// so an append to it copies rather than writing over its neighbour. The
// caller's list does not escape, so a literal built for the call stays on
// its stack.
func (s *listSlab) take(ts []*tensor) []*tensor {
	if len(ts) == 0 {
		return nil
	}
	if cap(s.cur)-len(s.cur) < len(ts) {
		switch {
		case len(ts) > arenaChunk:
			return append([]*tensor(nil), ts...) // never happens in the recipes
		case s.n < len(s.chunks):
			s.cur = s.chunks[s.n][:0]
		default:
			s.cur = make([]*tensor, 0, arenaChunk)
			s.chunks = append(s.chunks, s.cur)
		}
		s.n++
	}
	i := len(s.cur)
	s.cur = append(s.cur, ts...)
	return s.cur[i:len(s.cur):len(s.cur)]
}

func (s *listSlab) rewind() { s.n, s.cur = 0, nil }

func (s *listSlab) scrub() {
	for _, c := range s.chunks {
		clear(c[:cap(c)])
	}
	s.rewind()
}

func (g *gen) newTensorSlot() *tensor { return g.tslab.next() }
func (g *gen) newNodeSlot() *node     { return g.nslab.next() }

// tensors copies a list into the chunk of lists.
func (g *gen) tensors(ts []*tensor) []*tensor { return g.lslab.take(ts) }

// rewindTape reuses the nodes' chunks once the tape is empty: between
// phases, when every node has run.
func (g *gen) rewindTape() {
	if len(g.tape) != 0 {
		return
	}
	g.nslab.rewind()
	g.sslab.rewind()
	g.lslab.rewind()
}

// cat joins a site's kind and a suffix: the names are few and repeat every
// layer and step, and a concatenation per op was a heap allocation per op.
// Each generator keeps those it used (no lock per op); they come from one
// table for the process, so a new generator makes none of them again. The
// generator's cache outlives the trial with its reader (pool.go): it is
// keyed by content.
func (g *gen) cat(a, b string) string {
	fk := pairOf(a, b)
	if s, ok := g.fastCats.get(fk); ok {
		return s
	}
	s := g.catSlow(a, b)
	g.fastCats.put(fk, s)
	return s
}

func (g *gen) catSlow(a, b string) string {
	k := [2]string{a, b}
	if s, ok := g.cats[k]; ok {
		return s
	}
	if g.cats == nil {
		g.cats = map[[2]string]string{}
	}
	s := joined(k)
	g.cats[k] = s
	return s
}

var catNames struct {
	sync.Mutex
	m map[[2]string]string
}

func joined(k [2]string) string {
	catNames.Lock()
	defer catNames.Unlock()
	if s, ok := catNames.m[k]; ok {
		return s
	}
	if catNames.m == nil {
		catNames.m = map[[2]string]string{}
	}
	s := k[0] + k[1]
	catNames.m[k] = s
	return s
}

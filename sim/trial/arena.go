package trial

// The generator makes a tensor, a backward node and a few tensor lists per
// event. Allocated one by one they were more than one heap object per
// event, so the garbage collector paced every sweep that runs the model
// (issue 19). They come from chunks instead: a chunk is never moved or
// reused, so a pointer into it stays valid as long as anything refers to it
// and the collector frees it with its last user, exactly as before; only
// the number of allocations falls by the chunk's length.

const arenaChunk = 1024

func (g *gen) newTensorSlot() *tensor {
	if len(g.tslab) == cap(g.tslab) {
		g.tslab = make([]tensor, 0, arenaChunk)
	}
	g.tslab = g.tslab[:len(g.tslab)+1]
	return &g.tslab[len(g.tslab)-1]
}

func (g *gen) newNodeSlot() *node {
	if len(g.nslab) == cap(g.nslab) {
		g.nslab = make([]node, 0, arenaChunk)
	}
	g.nslab = g.nslab[:len(g.nslab)+1]
	return &g.nslab[len(g.nslab)-1]
}

// tensors copies a list into the chunk of lists; the result has no spare
// capacity, so an append to it copies rather than writing over its
// neighbour. The caller's list does not escape, so a literal built for the
// call stays on its stack.
func (g *gen) tensors(ts []*tensor) []*tensor {
	if len(ts) == 0 {
		return nil
	}
	if cap(g.pslab)-len(g.pslab) < len(ts) {
		g.pslab = make([]*tensor, 0, max(arenaChunk, len(ts)))
	}
	i := len(g.pslab)
	g.pslab = append(g.pslab, ts...)
	return g.pslab[i:len(g.pslab):len(g.pslab)]
}

// cat joins a site's kind and a suffix once per generator: the names are
// few and repeat every layer and step, and a concatenation per op was a
// heap allocation per op.
func (g *gen) cat(a, b string) string {
	k := [2]string{a, b}
	if s, ok := g.cats[k]; ok {
		return s
	}
	if g.cats == nil {
		g.cats = map[[2]string]string{}
	}
	s := a + b
	g.cats[k] = s
	return s
}

package trial

import "sync"

// A sweep (sim/workers under par, trials, study) runs thousands of trials,
// each a fresh reader whose generator used to make its tables, buffers and
// chunks anew: about 5,000 heap objects a trial. A reader its consumer
// releases (Release) goes back to a small free list instead, and the next
// Spec.Reader, in any goroutine, resets it for its trial (gen.reset,
// schedule.reset). The events are the same: everything a trial's events
// depend on is reset; only memory is kept.
//
// Close does not recycle: a consumer may still read the Stacks of a
// closed reader (the profiler names its sites after the replay ends).

// maxPooledReaders bounds the memory the free list keeps: about as many
// readers as a machine's worker pools have in flight at once. A reader of
// a BERT-base trial keeps about a megabyte.
const maxPooledReaders = 32

type readerPool struct {
	mu   sync.Mutex
	free []*reader
}

var readers readerPool

func (p *readerPool) get() *reader {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return r
	}
	return &reader{}
}

func (p *readerPool) put(r *reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxPooledReaders {
		p.free = append(p.free, r)
	}
}

// Release ends the reader, as Close does, and hands its memory to a later
// Spec.Reader. Nothing of the reader, its Stacks included, may be used
// after; a second Release does nothing. sim/workers releases its tasks'
// readers: it reads events only.
func (r *reader) Release() {
	if r.released {
		return
	}
	r.released = true
	g := r.g
	// What the dead trial's chunks and lists point to is dropped now, not
	// when the next trial overwrites it, so that a pooled reader keeps no
	// trial's memory alive.
	g.tslab.scrub()
	g.nslab.scrub()
	g.sslab.scrub()
	g.lslab.scrub()
	clear(g.tape[:cap(g.tape)])
	clear(g.scratch[:cap(g.scratch)])
	// The events' labels, which are all mark's: the rest of an event
	// holds no pointer, and clearing the whole buffer (hundreds of KiB)
	// at every release was 1% of the trial model's time.
	all := g.buf[:cap(g.buf)]
	for _, i := range g.labeled {
		all[i].Label = ""
	}
	g.labeled = g.labeled[:0]
	for _, l := range [][]*tensor{g.ptens, g.pgrad, g.bufs[:cap(g.bufs)], g.optState[:cap(g.optState)], g.castCache, g.castAlt} {
		clear(l)
	}
	g.relEmb, g.preds, g.losses = nil, nil, nil
	g.stacks = nil
	readers.put(r)
}

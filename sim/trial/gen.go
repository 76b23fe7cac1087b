package trial

import (
	"strconv"
	"sync"

	"github.com/memreplay/memreplay/trace"
)

// siteKey names an allocation site: a layer (-1 outside the layers) and a
// tensor kind; it becomes the event's one-frame stack
// ("layer.3.attention.probs", "optimizer.exp_avg").
type siteKey struct {
	layer int
	kind  string
}

func (k siteKey) String() string {
	if k.layer < 0 {
		return k.kind
	}
	return "layer." + strconv.Itoa(k.layer) + "." + k.kind
}

// siteNames keeps each site's name for every generator of the process: a
// sweep runs the same few models again and again, and each trial named its
// thousand-odd sites afresh, the largest share of its heap allocations.
var siteNames struct {
	sync.Mutex
	m map[siteKey]string
}

func siteName(k siteKey) string {
	siteNames.Lock()
	defer siteNames.Unlock()
	if s, ok := siteNames.m[k]; ok {
		return s
	}
	if siteNames.m == nil {
		siteNames.m = map[siteKey]string{}
	}
	s := k.String()
	siteNames.m[k] = s
	return s
}

// SiteFile is the Filename of every frame the model writes.
const SiteFile = "memreplay/trial"

// gen is the state of one trial's generation: the model's parameters,
// gradients and optimizer state, the tape of the micro-batch in flight, and
// the events of the current phase. A released reader's generator is reset
// for the next trial (pool.go), keeping its tables, buffers and chunks.
type gen struct {
	spec   Spec
	m      Model
	amp    bool
	sdpa   bool
	manual bool // hand-written attention (layers_manual.go)
	comp   bool // torch.compile (compile.go)
	eval   bool
	noGrad int

	B, S uint64 // the current batch's size and padded length

	// params, pidx and the groups are the model's tables (tables.go),
	// shared with every generator of the model: read-only.
	params   []param
	pidx     map[siteKey]int
	tables   *modelTables
	ptens    []*tensor
	pgrad    []*tensor
	gradSite []trace.StackID
	castSite []trace.StackID
	bufs     []*tensor // registered buffers (position_ids, RoPE tables)
	optState []*tensor
	optStep  int

	tape []*node
	// castCache holds each parameter's autocast copy (nil when none) until
	// the autocast region ends; castOrder lists them in the order made.
	// castAlt and castAltOrd are the empty pair a checkpointed layer's
	// recomputation swaps in (its own region).
	castCache, castAlt    []*tensor
	castOrder, castAltOrd []int
	relEmb                *tensor
	preds                 *tensor // eval: gathered logits
	losses                *tensor // eval: gathered losses

	gradBytes uint64
	live      int
	nextAddr  uint64

	// sites numbers the sites in the order of their first use, which is
	// the order the stack table interns them in: siteKeys[id-1] is site
	// id. The numbering outlives the trial with its reader (pool.go), as a
	// template: the next trial of the same shape uses its sites in the
	// same order, so it finds each under the same number instead of
	// numbering a thousand sites afresh. usedSites counts the trial's
	// sites so far, always the template's first ones; a trial whose next
	// new site is not the template's next cuts the template there
	// (forkSites). The table itself (stacks) is made only when the
	// reader's Stacks is asked for; a consumer that never asks
	// (sim/workers) costs no table, which was a third of a trial's heap
	// objects.
	sites     map[siteKey]trace.StackID
	siteKeys  []siteKey
	usedSites int
	stacks    *trace.Stacks
	// fast.go: sites, parameter indices and joined names by the address
	// of their strings, in front of sites, pidx and cats.
	fastSites  kindTable
	fastParams kindTable
	fastCats   pairTable
	// The current phase: its events and each one's cumulative op cost, used
	// to spread the phase's duration over them.
	buf     []trace.Event
	costAt  []float64
	costNow float64
	// labeled lists the places in buf's array that mark gave a label
	// since the reader was last released (pool.go drops those labels).
	labeled []int

	// arena.go: chunks the tensors, nodes, checkpoint segments and lists
	// come from, and the joined site names.
	tslab slab[tensor]
	nslab slab[node]
	sslab slab[segment]
	lslab listSlab
	cats  map[[2]string]string
	// scratch is optimizer.go's temporary list, reused step after step.
	scratch []*tensor
}

// addrBase makes the fake addresses look like device addresses.
const addrBase = 0x7f0000000000

func newGen(s Spec) *gen {
	g := &gen{}
	g.reset(s)
	return g
}

// reset makes g the generator of a new trial of s, as newGen would, but
// keeping what the last trial made that the next can use: buffers, maps
// (cleared), chunks, joined names.
func (g *gen) reset(s Spec) {
	old := *g
	t := tablesOf(s.Model)
	n := len(t.params)
	*g = gen{
		spec:     s,
		m:        s.Model,
		amp:      s.precision() != FP32,
		sdpa:     s.attention() == SDPA,
		manual:   s.attention() == Manual,
		comp:     s.Compile,
		B:        uint64(s.Batch),
		S:        uint64(s.SeqLen),
		params:   t.params,
		pidx:     t.pidx,
		tables:   t,
		nextAddr: addrBase,

		ptens:      zeroed(old.ptens, n),
		pgrad:      zeroed(old.pgrad, n),
		gradSite:   zeroed(old.gradSite, n),
		castSite:   zeroed(old.castSite, n),
		bufs:       old.bufs[:0],
		optState:   old.optState[:0],
		tape:       old.tape[:0],
		castCache:  zeroed(old.castCache, n),
		castAlt:    zeroed(old.castAlt, n),
		castOrder:  old.castOrder[:0],
		castAltOrd: old.castAltOrd[:0],
		sites:      old.sites,
		siteKeys:   old.siteKeys,
		buf:        old.buf[:0],
		costAt:     old.costAt[:0],
		labeled:    old.labeled,
		tslab:      old.tslab,
		nslab:      old.nslab,
		sslab:      old.sslab,
		lslab:      old.lslab,
		cats:       old.cats,
		fastSites:  old.fastSites,
		fastParams: old.fastParams,
		fastCats:   old.fastCats,
		scratch:    old.scratch[:0],
	}
	g.tslab.keep = keptTensorChunks
	if t != old.tables {
		g.fastParams.reset()
	}
	if g.sites == nil {
		g.sites = map[siteKey]trace.StackID{}
	}
	for i, p := range g.params {
		g.gradSite[i] = g.site(p.site.layer, t.gradKind[i])
		if g.amp {
			g.castSite[i] = g.site(p.site.layer, t.castKind[i])
		}
	}
}

// zeroed returns a zeroed slice of length n, in b's array when it fits.
func zeroed[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	b = b[:n]
	clear(b)
	return b
}

func (g *gen) site(layer int, kind string) trace.StackID {
	fk := keyOf(layer, kind)
	v, ok := g.fastSites.get(fk)
	id := trace.StackID(v)
	switch {
	case ok && int(id) <= g.usedSites:
		return id
	case ok && int(id) == g.usedSites+1:
		g.useSite(id)
		return id
	}
	id = g.siteSlow(layer, kind)
	if _, ok := g.fastSites.get(fk); !ok {
		g.fastSites.put(fk, int32(id))
	}
	return id
}

// siteSlow numbers a site the trial has not used yet (or one the fast
// table does not know).
func (g *gen) siteSlow(layer int, kind string) trace.StackID {
	k := siteKey{layer, kind}
	id, ok := g.sites[k]
	switch {
	case ok && int(id) <= g.usedSites:
		return id
	case ok && int(id) == g.usedSites+1:
		// The template's next site.
	default:
		// A new site, or a later one of the template: the trial parts
		// from the template here.
		g.forkSites()
		g.siteKeys = append(g.siteKeys, k)
		id = trace.StackID(len(g.siteKeys))
		g.sites[k] = id
	}
	g.useSite(id)
	return id
}

// useSite counts site id, the next of the template, as the trial's.
func (g *gen) useSite(id trace.StackID) {
	g.usedSites++
	if g.stacks != nil {
		g.intern(id)
	}
}

// forkSites cuts the template after the sites the trial has used.
func (g *gen) forkSites() {
	if len(g.siteKeys) == g.usedSites {
		return
	}
	for _, k := range g.siteKeys[g.usedSites:] {
		delete(g.sites, k)
	}
	g.siteKeys = g.siteKeys[:g.usedSites]
	g.fastSites.reset()
}

// table returns the trial's stack table, made from the sites used so far
// when first asked for; from then on each new site is interned as it
// comes.
func (g *gen) table() *trace.Stacks {
	if g.stacks == nil {
		g.stacks = trace.NewStacks()
		for i := range g.usedSites {
			g.intern(trace.StackID(i + 1))
		}
	}
	return g.stacks
}

// intern adds site id to the table, which holds sites 1..id-1.
func (g *gen) intern(id trace.StackID) {
	k := g.siteKeys[id-1]
	if got := g.stacks.Intern([]trace.Frame{{Filename: SiteFile, Name: siteName(k)}}); got != id {
		panic("trial: two sites named " + siteName(k)) // a recipe bug
	}
}

// emit appends an event. Its fields are stored one by one into the
// buffer's slot: appending a composite literal built it on the stack and
// copied it in wide loads that stalled on the narrow stores just made
// (store forwarding), 7% of the trial model's profile. The label is
// written only when a reused slot holds one, so that no pointer store
// (and no write barrier) is made per event.
func (g *gen) emit(a trace.Action, t *tensor) {
	n := len(g.buf)
	if n == cap(g.buf) {
		g.buf = append(g.buf, trace.Event{})
	} else {
		g.buf = g.buf[:n+1]
	}
	e := &g.buf[n]
	e.Action, e.Device, e.Addr, e.Size, e.Stream, e.TimeUS, e.DeviceFree, e.Stack = a, 0, t.addr, t.size(), 0, 0, 0, t.site
	if e.Label != "" {
		e.Label = ""
	}
	g.costAt = append(g.costAt, g.costNow)
}

func (g *gen) mark(a trace.Action, label string) {
	g.labeled = append(g.labeled, len(g.buf))
	g.buf = append(g.buf, trace.Event{Action: a, Label: label})
	g.costAt = append(g.costAt, g.costNow)
}

// cost advances the phase's op clock (microseconds at the reference
// throughput; only the proportions matter, see timing.go).
func (g *gen) cost(us float64) { g.costNow += us }

func (g *gen) mm(flops uint64) float64 { return float64(flops) / g.spec.flopsPerUS() }
func (g *gen) bw(bytes uint64) float64 { return float64(bytes) / ReferenceBandwidth * 1e6 }

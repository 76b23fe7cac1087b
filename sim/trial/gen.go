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
// the events of the current phase.
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

	params   []param
	pidx     map[siteKey]int
	ptens    []*tensor
	pgrad    []*tensor
	gradSite []trace.StackID
	castSite []trace.StackID
	bufs     []*tensor // registered buffers (position_ids, RoPE tables)
	optState []*tensor
	optStep  int

	tape      []*node
	castCache map[int]*tensor
	castOrder []int
	relEmb    *tensor
	preds     *tensor // eval: gathered logits
	losses    *tensor // eval: gathered losses

	gradBytes uint64
	live      int
	nextAddr  uint64

	stacks *trace.Stacks
	sites  map[siteKey]trace.StackID
	// The current phase: its events and each one's cumulative op cost, used
	// to spread the phase's duration over them.
	buf     []trace.Event
	costAt  []float64
	costNow float64

	// arena.go: chunks the tensors, nodes and lists come from, and the
	// joined site names.
	tslab []tensor
	nslab []node
	pslab []*tensor
	cats  map[[2]string]string
	// scratch is optimizer.go's temporary list, reused step after step.
	scratch []*tensor
	grps    [2][]int // optimizer.go's parameter groups
}

// addrBase makes the fake addresses look like device addresses.
const addrBase = 0x7f0000000000

func newGen(s Spec) *gen {
	g := &gen{
		spec:      s,
		m:         s.Model,
		amp:       s.precision() != FP32,
		sdpa:      s.attention() == SDPA,
		manual:    s.attention() == Manual,
		comp:      s.Compile,
		B:         uint64(s.Batch),
		S:         uint64(s.SeqLen),
		castCache: map[int]*tensor{},
		stacks:    trace.NewStacks(),
		sites:     map[siteKey]trace.StackID{},
		nextAddr:  addrBase,
	}
	g.params = g.m.params()
	g.pidx = make(map[siteKey]int, len(g.params))
	g.ptens = make([]*tensor, len(g.params))
	g.pgrad = make([]*tensor, len(g.params))
	g.gradSite = make([]trace.StackID, len(g.params))
	g.castSite = make([]trace.StackID, len(g.params))
	for i, p := range g.params {
		g.pidx[p.site] = i
		g.gradSite[i] = g.site(p.site.layer, "grad."+p.site.kind)
		if g.amp {
			g.castSite[i] = g.site(p.site.layer, p.site.kind+".autocast")
		}
	}
	return g
}

func (g *gen) site(layer int, kind string) trace.StackID {
	k := siteKey{layer, kind}
	if id, ok := g.sites[k]; ok {
		return id
	}
	id := g.stacks.Intern([]trace.Frame{{Filename: SiteFile, Name: siteName(k)}})
	g.sites[k] = id
	return id
}

func (g *gen) emit(a trace.Action, t *tensor) {
	g.buf = append(g.buf, trace.Event{Action: a, Addr: t.addr, Size: t.size(), Stack: t.site})
	g.costAt = append(g.costAt, g.costNow)
}

func (g *gen) mark(a trace.Action, label string) {
	g.buf = append(g.buf, trace.Event{Action: a, Label: label})
	g.costAt = append(g.costAt, g.costNow)
}

// cost advances the phase's op clock (microseconds at the reference
// throughput; only the proportions matter, see timing.go).
func (g *gen) cost(us float64) { g.costNow += us }

func (g *gen) mm(flops uint64) float64 { return float64(flops) / g.spec.flopsPerUS() }
func (g *gen) bw(bytes uint64) float64 { return float64(bytes) / ReferenceBandwidth * 1e6 }

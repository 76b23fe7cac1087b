package trial

import (
	"fmt"
	"io"
	"math"

	"github.com/memreplay/memreplay/trace"
)

// Source is the Header().Source of a trial's trace.
const Source = "memreplay-trial"

// Reader streams the trial's events as a trace.Reader on device 0, stream
// 0 (see the package comment for what they are).
func (s Spec) Reader() (trace.Reader, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	r := readers.get()
	r.start(s)
	return r, nil
}

type reader struct {
	s     Spec
	g     *gen
	sc    schedule
	pos   int
	clock float64 // the current phase's start, microseconds
	done  bool
	// label is s.String(), the trial_start and trial_end label; labelOf
	// the Spec it was made for, so that a reused reader makes it again
	// only for another Spec. steps and evals are the step and eval
	// markers' labels made so far, kept from trial to trial likewise.
	label    string
	labelOf  Spec
	hasLabel bool
	steps    []string
	evals    []string
	released bool
	// The phase in hand's times are stamped as its events are handed out,
	// stampBatch at a time (stamp): stamped events from the start of the
	// buffer have their TimeUS; those from lazyEnd on were stamped by fill.
	// A phase's buffer is hundreds of KiB (a BERT-base micro-batch is
	// thousands of events), far past the first-level cache, and stamping
	// it whole in fill was a pass over it of its own between the
	// generator's and the consumer's: now the stamp's touch of each event
	// brings it into the cache for the consumer's read.
	stamped, lazyEnd int
	t0, dur, total   float64 // the phase's start, length and op cost
}

// stampBatch is the events stamped and handed out at once: 18 KiB of
// them, well within a first-level data cache.
const stampBatch = 64

const maxMarkers = 1024

// start begins a trial of s on r, fresh or released (pool.go).
func (r *reader) start(s Spec) {
	if r.g == nil {
		r.g = &gen{}
	}
	r.g.reset(s)
	r.sc.reset(s)
	r.s, r.pos, r.clock, r.done, r.released = s, 0, 0, false, false
	if !r.hasLabel || r.labelOf != s {
		r.label, r.labelOf, r.hasLabel = s.String(), s, true
	}
}

// marker returns the label "step n" (or "eval after step n"), made once
// per reader for the first maxMarkers steps.
func marker(labels *[]string, format string, n int) string {
	if n >= maxMarkers {
		return fmt.Sprintf(format, n)
	}
	for len(*labels) <= n {
		*labels = append(*labels, fmt.Sprintf(format, len(*labels)))
	}
	return (*labels)[n]
}

func (r *reader) Header() trace.Header {
	return trace.Header{
		Version: trace.FormatVersion,
		Source:  Source,
		Devices: []trace.Device{{Index: 0}},
		Tools:   map[string]string{"memreplay-trial": ModelVersion},
		Notes:   []string{"trial model: " + r.s.String()},
	}
}

// ModelVersion changes whenever the generated sequence for a Spec changes.
const ModelVersion = "1"

func (r *reader) Stacks() *trace.Stacks            { return r.g.table() }
func (r *reader) Initial() ([]trace.Segment, bool) { return nil, false }
func (r *reader) Final() ([]trace.Segment, bool)   { return nil, false }
func (r *reader) Close() error                     { return nil }

func (r *reader) Next(e *trace.Event) error {
	for r.pos >= len(r.g.buf) {
		if r.done {
			return io.EOF
		}
		r.fill()
	}
	if r.pos >= r.stamped {
		r.stamp(r.pos + stampBatch)
	}
	copyEvent(e, &r.g.buf[r.pos])
	r.pos++
	return nil
}

// NextBatch returns the events not yet read, up to the end of the phase in
// hand, or the next phase's when those are read, at most stampBatch of
// them; io.EOF after the last. The slice is the reader's own: its consumer reads it in place
// (sim/workers: no copy and no interface call per event) and must not
// keep or change it; it is valid until the next call of NextBatch, Next
// or Release. Next and NextBatch may be mixed: each takes the events
// after those the other returned. A slice returned with a nil error is
// never empty.
func (r *reader) NextBatch() ([]trace.Event, error) {
	for r.pos >= len(r.g.buf) {
		if r.done {
			return nil, io.EOF
		}
		r.fill()
	}
	end := min(r.pos+stampBatch, len(r.g.buf))
	if end > r.stamped {
		r.stamp(end)
	}
	b := r.g.buf[r.pos:end]
	r.pos = end
	return b, nil
}

// stamp gives the phase's events up to end their times, as fill's loop
// did: each is placed in the phase by the op cost before it.
func (r *reader) stamp(end int) {
	g := r.g
	end = min(end, r.lazyEnd)
	buf, costAt := g.buf[:end], g.costAt[:end]
	for i := r.stamped; i < len(buf); i++ {
		f := 0.0
		if r.total > 0 {
			f = costAt[i] / r.total
		}
		buf[i].TimeUS = int64(math.Floor(r.t0 + f*r.dur))
	}
	r.stamped = max(r.stamped, end)
}

// copyEvent sets *dst to *src field by field, storing the label only when
// it differs: a whole-struct copy of an Event (it holds a string) is a
// typed copy, with a bulk write barrier while the collector marks, once
// per event read. TestCopyEventCopiesEveryField keeps it in step with
// trace.Event.
func copyEvent(dst, src *trace.Event) {
	dst.Action, dst.Device, dst.Addr, dst.Size = src.Action, src.Device, src.Addr, src.Size
	dst.Stream, dst.TimeUS, dst.DeviceFree, dst.Stack = src.Stream, src.TimeUS, src.DeviceFree, src.Stack
	if dst.Label != src.Label {
		dst.Label = src.Label
	}
}

// fill generates the next phase's events; their times are stamped as they
// are handed out (stamp): the phase spans [clock, clock+phaseUS), each event
// placed by the op cost before it.
func (r *reader) fill() {
	g := r.g
	g.buf, g.costAt, g.costNow, r.pos = g.buf[:0], g.costAt[:0], 0, 0
	g.rewindTape()
	p, ok := r.sc.next()
	if !ok {
		r.done = true
		return
	}
	switch p.kind {
	case phLoad:
		g.mark(trace.ActionTrialStart, r.label)
		g.load()
	case phMicro:
		if p.index == 1 {
			g.mark(trace.ActionMarker, marker(&r.steps, "step %d", p.step))
		}
		g.micro(p)
	case phOptim:
		g.optimizerStep()
	case phEval:
		if p.index == 1 {
			g.mark(trace.ActionMarker, marker(&r.evals, "eval after step %d", p.step))
		}
		g.evalBatch(p)
	case phTeardown:
		g.teardown()
	}
	dur := r.s.phaseUS(p)
	r.t0, r.dur, r.total = r.clock, dur, g.costNow
	r.stamped, r.lazyEnd = 0, len(g.buf)
	r.clock += dur
	if p.kind == phTeardown {
		g.mark(trace.ActionTrialEnd, r.label)
		g.buf[len(g.buf)-1].TimeUS = int64(math.Floor(r.clock))
		r.done = true
	}
}

// load is model.to("cuda"): every parameter, then the registered buffers.
func (g *gen) load() {
	for i, p := range g.params {
		t := g.newTensor(p.elems, 4, g.site(p.site.layer, p.site.kind))
		t.param = int32(i)
		g.ptens[i] = t
		g.cost(float64(t.size()))
	}
	m := g.m
	P := u(m.MaxPositions)
	switch m.arch() {
	case DecoderLM:
		if P > 0 {
			d := u(m.Hidden / m.Heads)
			g.bufs = append(g.bufs, g.alloc(P*d/2, 4, -1, "rope.cos"), g.alloc(P*d/2, 4, -1, "rope.sin"))
		}
	default:
		if P > 0 {
			g.bufs = append(g.bufs, g.alloc(P, 8, -1, "embeddings.position_ids"))
		}
		if m.TypeVocab > 0 && P > 0 {
			g.bufs = append(g.bufs, g.alloc(P, 8, -1, "embeddings.token_type_ids"))
		}
	}
}

// inputs moves a batch to the device (HF _prepare_inputs): int64
// input_ids, attention_mask (encoders), token_type_ids (when the model has
// token types), labels (per sequence, or per token for an LM).
func (g *gen) inputs(buf *[4]*tensor) []*tensor {
	BS := g.B * g.S
	in := append(buf[:0], g.alloc(BS, 8, -1, "batch.input_ids"))
	if g.m.arch() == DecoderLM {
		return append(in, g.alloc(BS, 8, -1, "batch.labels"))
	}
	in = append(in, g.alloc(BS, 8, -1, "batch.attention_mask"))
	if g.m.TypeVocab > 0 {
		in = append(in, g.alloc(BS, 8, -1, "batch.token_type_ids"))
	}
	return append(in, g.alloc(g.B, 8, -1, "batch.labels"))
}

// micro is one training micro-batch: forward under autocast, the loss
// scaled for accumulation (and by GradScaler), backward.
func (g *gen) micro(p phase) {
	g.S = uint64(p.seq)
	var inb [4]*tensor // the caller's array: a returned list goes to the heap
	in := g.inputs(&inb)
	loss, logits := g.forward()
	g.clearCastCache() // the autocast region ends with the loss
	if g.spec.gradAccum() > 1 {
		l2 := g.op(-1, "loss.scaled_for_accumulation", 1, 4, []*tensor{loss}, 0)
		g.drop(loss)
		loss = l2
	}
	if g.spec.precision() == FP16 {
		l2 := g.op(-1, "loss.grad_scaler", 1, 4, []*tensor{loss}, 0)
		g.drop(loss)
		loss = l2
	}
	g.backward(loss)
	g.drop(loss)
	g.drop(logits)
	for _, t := range in {
		g.drop(t)
	}
}

// evalBatch is one batch of an evaluation pass (model.eval(), no_grad):
// the loss per example and (for classifiers) the logits are gathered with
// torch.cat, a new buffer each batch.
func (g *gen) evalBatch(p phase) {
	g.S = uint64(p.seq)
	g.eval = true
	g.noGrad++
	var inb [4]*tensor // the caller's array: a returned list goes to the heap
	in := g.inputs(&inb)
	loss, logits := g.forward()
	g.clearCastCache()
	rep := g.alloc(g.B, 4, -1, "eval.losses.batch")
	g.drop(loss)
	g.losses = g.concat(g.losses, rep, "eval.losses")
	g.drop(rep)
	if g.m.arch() != DecoderLM {
		g.preds = g.concat(g.preds, logits, "eval.preds")
	}
	g.drop(logits)
	for _, t := range in {
		g.drop(t)
	}
	if p.last {
		g.drop(g.preds)
		g.drop(g.losses)
		g.preds, g.losses = nil, nil
	}
	g.noGrad--
	g.eval = false
}

// concat is HF's nested_concat: torch.cat((acc, x)) into a new tensor.
func (g *gen) concat(acc, x *tensor, kind string) *tensor {
	n := x.elems
	if acc != nil {
		n += acc.elems
	}
	t := g.alloc(n, x.bytes, -1, kind)
	g.drop(acc)
	return t
}

// teardown frees what the trial owned: optimizer state, any gradients,
// buffers, weights.
func (g *gen) teardown() {
	for i, t := range g.optState {
		if t != nil {
			g.free(t)
			g.optState[i] = nil
		}
	}
	for i, t := range g.pgrad {
		if t != nil {
			g.free(t)
			g.pgrad[i] = nil
		}
	}
	for _, t := range g.bufs {
		g.drop(t)
	}
	g.bufs = g.bufs[:0]
	for i, t := range g.ptens {
		if t != nil {
			g.free(t)
			g.ptens[i] = nil
		}
	}
}

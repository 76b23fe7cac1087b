package trial

import (
	"github.com/memreplay/memreplay/trace"
)

// This file is the small autograd engine the layer recipes run on: tensors
// with reference counts, a tape of backward nodes, and the rules by which
// PyTorch's autograd allocates and releases memory in backward. Only
// memory and order are modelled; no values.

// tensor is one CUDA allocation owned by the trial.
type tensor struct {
	addr  uint64
	elems uint64
	grad  *tensor
	refs  int32 // Python references plus autograd saves; freed at 0
	param int32 // >= 0: a parameter (a leaf that lives until teardown)
	site  trace.StackID
	bytes uint8 // element size: 8 int64, 4 fp32, 2 fp16/bf16, 1 bool
}

func (t *tensor) size() uint64 { return t.elems * uint64(t.bytes) }
func (t *tensor) half() bool   { return t.bytes == 2 }

// node is a backward function: when its output's gradient arrives it
// allocates a gradient for each input (or passes the output's on, for
// additions and copies), then releases that gradient and its saved
// tensors, as torch.autograd.Engine does.
type node struct {
	site  trace.StackID // where its input gradients are allocated
	in    []*tensor
	pass  uint32 // bit i: input i receives the output's gradient itself
	out   *tensor
	saved []*tensor
	tmp   uint64 // bytes of a backward workspace (allocated and freed)
	ckpt  *segment
}

// segment is a gradient-checkpointed layer: only its input is kept; the
// backward reruns its forward to rebuild what it saves.
type segment struct {
	layer int
	in    *tensor
	rel   *tensor // DeBERTa's normalised rel_embeddings, an input too
}

func (g *gen) newTensor(elems uint64, bytes uint8, site trace.StackID) *tensor {
	t := g.newTensorSlot()
	// Field by field, the pointer only when set: a composite literal is a
	// typed store of the whole slot, with a write barrier for grad while
	// the collector marks, once per tensor.
	t.addr, t.elems, t.bytes, t.refs, t.param, t.site = g.nextAddr, elems, bytes, 1, -1, site
	if t.grad != nil {
		t.grad = nil
	}
	// Fake addresses: unique for the trial's lifetime (never reused), 512
	// B aligned like the allocator's blocks.
	g.nextAddr += (t.size() + 511) &^ 511
	if t.size() == 0 {
		g.nextAddr += 512
	}
	g.emit(trace.ActionAlloc, t)
	g.live++
	return t
}

// alloc allocates an activation-like tensor at a site.
func (g *gen) alloc(elems uint64, bytes uint8, layer int, kind string) *tensor {
	return g.newTensor(elems, bytes, g.site(layer, kind))
}

func (g *gen) free(t *tensor) {
	g.emit(trace.ActionFreeRequested, t)
	g.emit(trace.ActionFreeCompleted, t)
	g.live--
	t.refs = -1 << 30 // poisoned: a second free is a bug the tests catch
}

// drop releases one reference (a Python variable going out of scope, a
// saved tensor released after its node ran).
func (g *gen) drop(t *tensor) {
	if t == nil || t.param >= 0 {
		return
	}
	t.refs--
	if t.refs == 0 {
		g.free(t)
	}
}

func (g *gen) keep(t *tensor) {
	if t != nil && t.param < 0 {
		t.refs++
	}
}

// rec appends a backward node when grad mode is on; its saved tensors get
// a reference each. Under no_grad nothing is recorded, so tensors die with
// their last Python reference. It takes the node's fields one by one
// because escape analysis does not tell a struct's fields apart: a node
// passed whole would move its callers' lists (usually literals on their
// stack) to the heap along with its output tensor. The lists are copied
// into the arena.
func (g *gen) rec(site trace.StackID, in []*tensor, pass uint32, out *tensor, saved []*tensor, tmp uint64) {
	if g.noGrad > 0 {
		return
	}
	for _, s := range saved {
		g.keep(s)
	}
	m := g.newNodeSlot()
	*m = node{site: site, in: g.tensors(in), pass: pass, out: out, saved: g.tensors(saved), tmp: tmp}
	g.tape = append(g.tape, m)
}

// op allocates an output and records its node in one call: the common case
// of an operator with one output.
func (g *gen) op(layer int, kind string, elems uint64, bytes uint8, in []*tensor, pass uint32, saved ...*tensor) *tensor {
	out := g.alloc(elems, bytes, layer, kind)
	g.rec(g.site(layer, g.cat(kind, ".grad")), in, pass, out, saved, 0)
	return out
}

// backward runs the tape from the loss, in reverse.
func (g *gen) backward(loss *tensor) {
	loss.grad = g.alloc(1, 4, -1, "loss.grad")
	tape := g.tape
	g.tape = nil
	g.runBackward(tape)
	g.tape = tape[:0]
}

func (g *gen) runBackward(tape []*node) {
	for i := len(tape) - 1; i >= 0; i-- {
		n := tape[i]
		tape[i] = nil
		if n.ckpt != nil {
			g.recompute(n)
			continue
		}
		gout := n.out.grad
		n.out.grad = nil
		if gout != nil {
			var tmp *tensor
			if n.tmp > 0 {
				tmp = g.alloc(n.tmp, 1, -1, "backward.workspace")
			}
			for j, x := range n.in {
				if x == nil {
					continue
				}
				var gx *tensor
				if n.pass&(1<<j) != 0 && x.size() == gout.size() {
					gx = gout
					g.keep(gx)
				} else {
					site := n.site
					if x.param >= 0 {
						site = g.gradSite[x.param]
					}
					gx = g.newTensor(x.elems, x.bytes, site)
				}
				g.accumulate(x, gx)
			}
			if tmp != nil {
				g.free(tmp)
			}
			g.drop(gout)
		}
		for _, s := range n.saved {
			g.drop(s)
		}
	}
}

// accumulate adds a gradient into x's: the first one is kept (autograd's
// InputBuffer, AccumulateGrad stealing the tensor into .grad), later ones
// are added in place and released. A shared gradient (passed on to two
// inputs) cannot be stolen into .grad: AccumulateGrad clones it.
func (g *gen) accumulate(x, gx *tensor) {
	if x.param >= 0 {
		p := x.param
		if g.pgrad[p] == nil {
			if gx.refs > 1 {
				c := g.newTensor(gx.elems, gx.bytes, g.gradSite[p])
				g.drop(gx)
				gx = c
			}
			g.pgrad[p] = gx
			g.gradBytes += gx.size()
			return
		}
		g.drop(gx)
		return
	}
	if x.grad == nil {
		x.grad = gx
		return
	}
	g.drop(gx)
}

// recompute is a checkpointed layer's backward: rerun the layer's forward
// with grad enabled (its own autocast region), then backpropagate through
// it into the saved input.
func (g *gen) recompute(n *node) {
	seg := n.ckpt
	gout := n.out.grad
	n.out.grad = nil
	outer := g.tape
	g.tape = nil
	saveCache, saveOrder := g.castCache, g.castOrder
	g.castCache, g.castOrder = g.castAlt, g.castAltOrd[:0]
	g.keep(seg.in)
	g.relEmb = seg.rel
	out := g.layer(seg.layer, seg.in)
	g.relEmb = nil
	g.clearCastCache()
	g.castAlt, g.castAltOrd = g.castCache, g.castOrder
	g.castCache, g.castOrder = saveCache, saveOrder
	sub := g.tape
	g.tape = outer
	out.grad = gout
	g.runBackward(sub)
	g.drop(out)
	for _, s := range n.saved {
		g.drop(s)
	}
}

package trial

// torch.compile (Spec.Compile) of the decoder LM, as Inductor's default
// mode runs a training step: AOTAutograd traces forward and backward into
// one joint graph, its min-cut partitioner chooses what the forward saves
// for the backward, and Inductor fuses the pointwise ops into a few
// kernels. The partitioner's defaults (torch/_functorch/config.py) decide
// what is saved: matmuls may not be recomputed (compute-intensive), nor
// reductions whose output is much smaller than their input
// (ban_recompute_reductions), nor any node the backward must materialise
// anyway because a matmul reads it (ban_recompute_materialized_backward);
// the rest, pointwise ops on the allowlist, is recomputed inside the
// backward's fused kernels. Per layer that means:
//
//   - Pointwise chains are not materialised in the forward: RMSNorm (x²,
//     mean, rsqrt, scale, the cast to the matmul dtype) is one kernel
//     writing its output and the per-row rstd; RoPE one kernel per
//     projection; scaling, masking and softmax one reduction kernel writing
//     the probabilities (hand-written or F.softmax alike); SiLU times the
//     gate one kernel.
//   - Saved: every matmul input, since the weight gradient is a matmul
//     reading it (the two norm outputs, rotated q and k, v, the
//     probabilities, the context, the gated product), the w1 and w3
//     outputs (the gate's backward reads them), the two rstd rows, and the
//     residual stream (the layer input and the sum after attention, fp32)
//     for the norms' backward. Under AMP the 16-bit weight copies are
//     matmul inputs of the backward too, so they are saved as eager
//     autocast's cache keeps them; and the softmax's fp32 output is not a
//     matmul input: the scores (16-bit) are saved and it is recomputed.
//   - Not saved, where eager autograd saves them: the RMSNorm
//     intermediates (x², x·rstd), SiLU's sigmoid and output, the softmax's
//     intermediates (exp, the difference), the pre-RoPE q and k.
//
// What cannot be known without running Inductor: its buffer reuse inside
// a kernel sequence (it reuses a dead buffer of the same size instead of
// allocating), graph breaks (the loss is assumed outside the compiled
// model, in eager mode, as `torch.compile(model)` leaves it), and the
// partitioner's choices between cuts of equal or near-equal size (q and k
// before or after RoPE; under AMP the 16-bit attention output instead of
// the fp32 residual sum). The allocation count depends on those; the
// saved bytes per layer by a few per cent at most.

// cLinear is a matmul in the compiled graph: the output in the activation
// dtype, its input saved. Under AMP the weight's 16-bit copy is made for
// the call and saved for the backward's input gradient; the backward's
// 16-bit weight gradient, cast to fp32 for .grad, is a workspace.
func (g *gen) cLinear(l int, kind string, x *tensor, w int, rows, in, out uint64) *tensor {
	wt := g.ptens[w]
	saved, ns := [2]*tensor{x}, 1 // an array: a list that may grow goes to the heap
	var tmp uint64
	var cast *tensor
	if g.amp {
		cast = g.newTensor(wt.elems, 2, g.castSite[w])
		saved[1], ns = cast, 2
		tmp = wt.elems * 2
	}
	y := g.alloc(rows*out, g.act(), l, kind)
	g.rec(g.site(l, g.cat(kind, ".grad")), []*tensor{x, wt}, 0, y, saved[:ns], tmp)
	g.drop(cast)
	g.cost(g.mm(2 * rows * in * out))
	return y
}

// cNorm is RMSNorm as one fused kernel: the per-row rstd (saved with the
// input) and the output, in the dtype of the matmuls that read it.
func (g *gen) cNorm(l int, kind string, x *tensor, w int) *tensor {
	rows := g.rows()
	rs := g.alloc(rows, 4, l, g.cat(kind, ".rstd"))
	y := g.alloc(x.elems, g.act(), l, kind)
	g.rec(g.site(l, g.cat(kind, ".grad")), []*tensor{x, g.ptens[w]}, 0, y, []*tensor{x, rs}, 0)
	g.drop(rs)
	g.cost(g.bw(x.elems * 12))
	return y
}

// decoderLayerCompiled is decoderLayer as the compiled graph runs it.
func (g *gen) decoderLayerCompiled(l int, x *tensor) *tensor {
	rows, H, I := g.rows(), u(g.m.Hidden), u(g.m.Intermediate)
	BA, SS, d := g.B*u(g.m.Heads), g.S*g.S, u(g.m.Hidden/g.m.Heads)
	act := g.act()
	h := g.cNorm(l, "ln1", x, g.p(l, "ln1.weight"))
	q := g.cLinear(l, "attention.q", h, g.p(l, "attention.q.weight"), rows, H, H)
	k := g.cLinear(l, "attention.k", h, g.p(l, "attention.k.weight"), rows, H, H)
	v := g.cLinear(l, "attention.v", h, g.p(l, "attention.v.weight"), rows, H, H)
	g.drop(h)
	qr := g.op(l, "attention.q.rope", q.elems, act, []*tensor{q}, 0)
	g.drop(q)
	kr := g.op(l, "attention.k.rope", k.elems, act, []*tensor{k}, 0)
	g.drop(k)
	g.cost(g.bw(rows * H * uint64(act) * 6))
	var ctx *tensor
	if g.sdpa {
		ctx = g.sdpaAttention(l, qr, kr, v)
	} else {
		sc := g.op(l, "attention.scores", BA*SS, act, []*tensor{qr, kr}, 0, qr, kr)
		g.cost(g.mm(2 * BA * SS * d))
		g.drop(qr)
		g.drop(kr)
		// The fused softmax: its output, in the matmul's dtype, is saved
		// for P·V's backward. In fp32 the softmax's backward reads the same
		// tensor; under AMP it recomputes the fp32 probabilities from the
		// saved 16-bit scores (a workspace in the backward).
		pr := g.alloc(BA*SS, act, l, "attention.probs")
		saved, ns, tmp := [2]*tensor{pr}, 1, uint64(0)
		if g.amp {
			saved[1], ns, tmp = sc, 2, BA*SS*4
		}
		g.rec(g.site(l, "attention.probs.grad"), []*tensor{sc}, 0, pr, saved[:ns], tmp)
		g.drop(sc)
		g.cost(g.bw(BA * SS * 3 * uint64(act)))
		ctx = g.op(l, "attention.context", rows*H, act, []*tensor{pr, v}, 0, pr, v)
		g.cost(g.mm(2 * BA * SS * d))
		g.drop(pr)
		g.drop(v)
	}
	o := g.cLinear(l, "attention.output", ctx, g.p(l, "attention.output.weight"), rows, H, H)
	g.drop(ctx)
	x2 := g.add(l, "attention.residual", x, o)
	g.drop(o)
	g.drop(x)
	h2 := g.cNorm(l, "ln2", x2, g.p(l, "ln2.weight"))
	a := g.cLinear(l, "ffn.w1", h2, g.p(l, "ffn.w1.weight"), rows, H, I)
	b := g.cLinear(l, "ffn.w3", h2, g.p(l, "ffn.w3.weight"), rows, H, I)
	g.drop(h2)
	gt := g.op(l, "ffn.gate", rows*I, act, []*tensor{a, b}, 0, a, b)
	g.drop(a)
	g.drop(b)
	g.cost(g.bw(rows * I * 3 * uint64(act)))
	y := g.cLinear(l, "ffn.w2", gt, g.p(l, "ffn.w2.weight"), rows, I, H)
	g.drop(gt)
	x3 := g.add(l, "ffn.residual", x2, y)
	g.drop(y)
	g.drop(x2)
	return x3
}

package trial

// torch.compile (Spec.Compile) of the decoder LM, as Inductor's default
// mode runs a training step: AOTAutograd traces forward and backward into
// one joint graph, its min-cut partitioner chooses what the forward saves
// for the backward, and Inductor fuses the pointwise ops into a few
// kernels. What that changes in memory, per layer:
//
//   - Pointwise chains are not materialised: RMSNorm (x², mean, rsqrt,
//     scale) is one kernel writing its output and the per-row rstd; RoPE
//     one kernel per projection; scaling, masking and softmax one reduction
//     kernel writing the probabilities (hand-written or F.softmax alike);
//     SiLU times the gate one kernel. The residual addition is fused into
//     the next norm's kernel.
//   - The partitioner saves matmul outputs and reductions and recomputes
//     pointwise ops in the backward (its default bans recomputing
//     reductions, and it minimises saved bytes): saved per layer are the
//     layer input and the residual sum (fp32), the two rstd rows, the
//     rotated q and k, v, the probabilities (one seq*seq tensor in the
//     activation dtype), the attention context, and the two FFN matmul
//     outputs w1·h and w3·h. The norm outputs and the gated product, which
//     feed matmuls, are recomputed in the backward (a transient each, the
//     node's workspace), as are autocast's 16-bit weight copies: there is
//     no autocast cache keeping them for the whole forward.
//
// What cannot be known without running Inductor: its buffer reuse inside
// a kernel sequence (it reuses a dead buffer of the same size instead of
// allocating), graph breaks (the loss is assumed outside the compiled
// model, in eager mode, as `torch.compile(model)` leaves it), and the
// partitioner's choice between equal-sized alternatives (saving q and k
// before or after RoPE). Peak live bytes do not depend on those within a
// few per cent; the allocation count does (fewer, larger kernels).

// cLinear is a matmul in the compiled graph: the output in the activation
// dtype; it saves its input unless the input is recomputable (then the
// backward rebuilds it: a workspace of the input's size). Under AMP the
// 16-bit weight is cast for the call and again in the backward.
func (g *gen) cLinear(l int, kind string, x *tensor, w int, rows, in, out uint64, recompute bool) *tensor {
	wt := g.ptens[w]
	var cast *tensor
	var tmp uint64
	if g.amp {
		cast = g.newTensor(wt.elems, 2, g.castSite[w])
		tmp += wt.elems * 2
	}
	y := g.alloc(rows*out, g.act(), l, kind)
	n := &node{site: g.site(l, kind+".grad"), in: []*tensor{x, wt}, out: y}
	if recompute {
		n.tmp = tmp + x.size()
	} else {
		n.saved = []*tensor{x}
		n.tmp = tmp
	}
	g.record(n)
	if cast != nil {
		g.free(cast)
	}
	g.cost(g.mm(2 * rows * in * out))
	return y
}

// cNorm is RMSNorm as one fused kernel: the per-row rstd (saved with the
// input) and the output, in the dtype of the matmuls that read it.
func (g *gen) cNorm(l int, kind string, x *tensor, w int) *tensor {
	rows := g.rows()
	rs := g.alloc(rows, 4, l, kind+".rstd")
	y := g.alloc(x.elems, g.act(), l, kind)
	g.record(&node{site: g.site(l, kind+".grad"), in: []*tensor{x, g.ptens[w]}, out: y, saved: []*tensor{x, rs}})
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
	q := g.cLinear(l, "attention.q", h, g.p(l, "attention.q.weight"), rows, H, H, true)
	k := g.cLinear(l, "attention.k", h, g.p(l, "attention.k.weight"), rows, H, H, true)
	v := g.cLinear(l, "attention.v", h, g.p(l, "attention.v.weight"), rows, H, H, true)
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
		pr := g.opSaveOut(l, "attention.probs", BA*SS, act, sc)
		g.drop(sc)
		g.cost(g.bw(BA * SS * 3 * uint64(act)))
		ctx = g.op(l, "attention.context", rows*H, act, []*tensor{pr, v}, 0, pr, v)
		g.cost(g.mm(2 * BA * SS * d))
		g.drop(pr)
		g.drop(v)
	}
	o := g.cLinear(l, "attention.output", ctx, g.p(l, "attention.output.weight"), rows, H, H, false)
	g.drop(ctx)
	x2 := g.add(l, "attention.residual", x, o)
	g.drop(o)
	g.drop(x)
	h2 := g.cNorm(l, "ln2", x2, g.p(l, "ln2.weight"))
	a := g.cLinear(l, "ffn.w1", h2, g.p(l, "ffn.w1.weight"), rows, H, I, true)
	b := g.cLinear(l, "ffn.w3", h2, g.p(l, "ffn.w3.weight"), rows, H, I, true)
	g.drop(h2)
	gt := g.op(l, "ffn.gate", rows*I, act, []*tensor{a, b}, 0, a, b)
	g.drop(a)
	g.drop(b)
	g.cost(g.bw(rows * I * 3 * uint64(act)))
	y := g.cLinear(l, "ffn.w2", gt, g.p(l, "ffn.w2.weight"), rows, I, H, true)
	g.drop(gt)
	x3 := g.add(l, "ffn.residual", x2, y)
	g.drop(y)
	g.drop(x2)
	return x3
}

package trial

// The forward recipes of the three architectures, op by op in the order
// Hugging Face's modelling code (and the CS336 Transformer LM) calls them.
// Each op allocates its output, records what autograd saves, and drops
// Python references when the variable is last used; the engine (graph.go)
// turns that into allocs and frees.

// p looks up a parameter's index.
func (g *gen) p(layer int, kind string) int {
	fk := keyOf(layer, kind)
	if i, ok := g.fastParams.get(fk); ok {
		return int(i)
	}
	i, ok := g.pidx[siteKey{layer, kind}]
	if !ok {
		panic("trial: no parameter " + kind) // a recipe bug, not an input error
	}
	g.fastParams.put(fk, int32(i))
	return i
}

// forward runs the model on the current batch and returns the loss and the
// logits (kept by the caller until after backward, as HF's ModelOutput
// keeps them).
func (g *gen) forward() (loss, logits *tensor) {
	switch g.m.arch() {
	case DecoderLM:
		return g.forwardDecoder()
	}
	return g.forwardEncoder()
}

func (g *gen) rows() uint64 { return g.B * g.S }

func (g *gen) forwardEncoder() (loss, logits *tensor) {
	m, rows, H := g.m, g.rows(), u(g.m.Hidden)
	// Embeddings (fp32 under autocast: embedding is on no autocast list).
	x := g.op(-1, "embeddings.word", rows*H, 4, []*tensor{g.ptens[g.p(-1, "embeddings.word")]}, 0)
	g.cost(g.bw(rows * H * 8))
	if m.arch() == Encoder {
		pe := g.op(-1, "embeddings.position", rows*H, 4, []*tensor{g.ptens[g.p(-1, "embeddings.position")]}, 0)
		s := g.add(-1, "embeddings.sum", x, pe)
		g.drop(x)
		g.drop(pe)
		x = s
	}
	if m.TypeVocab > 0 {
		te := g.op(-1, "embeddings.token_type", rows*H, 4, []*tensor{g.ptens[g.p(-1, "embeddings.token_type")]}, 0)
		s := g.add(-1, "embeddings.sum", x, te)
		g.drop(x)
		g.drop(te)
		x = s
	}
	ln := g.layerNorm(-1, "embeddings.LayerNorm", x, g.p(-1, "embeddings.LayerNorm.weight"), g.p(-1, "embeddings.LayerNorm.bias"), rows)
	g.drop(x)
	x = g.dropout(-1, "embeddings.dropout", ln)
	g.drop(ln)

	// The additive attention mask, once per forward: HF's extended mask
	// (batch x 1 x 1 x seq, fp32) for eager BERT, the expanded 4-D mask for
	// SDPA, DeBERTa's batch x 1 x seq x seq product and relative positions.
	var temps [3]*tensor // an array: a list that may grow goes to the heap
	fwdTemps := temps[:0]
	switch {
	case m.arch() == DeBERTa:
		fwdTemps = append(fwdTemps,
			g.alloc(g.B*g.S*g.S, 8, -1, "encoder.attention_mask"),
			g.alloc(g.S*g.S, 8, -1, "encoder.relative_pos"))
		rel := g.layerNorm(-1, "encoder.rel_embeddings.LayerNorm", g.ptens[g.p(-1, "encoder.rel_embeddings")],
			g.p(-1, "encoder.LayerNorm.weight"), g.p(-1, "encoder.LayerNorm.bias"), 2*u(m.PositionBuckets))
		g.relEmb = rel
		fwdTemps = append(fwdTemps, rel)
	case g.sdpa:
		fwdTemps = append(fwdTemps, g.alloc(g.B*g.S*g.S, 4, -1, "encoder.attention_mask"))
	default:
		fwdTemps = append(fwdTemps, g.alloc(g.B*g.S, 4, -1, "encoder.attention_mask"))
	}

	for l := 0; l < m.Layers; l++ {
		x = g.layerMaybeCheckpointed(l, x)
	}
	for _, t := range fwdTemps {
		g.drop(t)
	}
	g.relEmb = nil

	// Classification head on the first token: dropout, dense, tanh,
	// dropout, out projection (RoBERTa's head; BERT's pooler+classifier and
	// DeBERTa's ContextPooler allocate the same).
	B, L := g.B, u(m.labels())
	cls := g.op(-1, "head.cls", B*H, x.bytes, []*tensor{x}, 0)
	g.drop(x)
	d1 := g.dropout(-1, "head.dropout", cls)
	g.drop(cls)
	h := g.linear(-1, "head.dense", d1, g.p(-1, "head.dense.weight"), g.p(-1, "head.dense.bias"), B, H, H)
	g.drop(d1)
	t := g.unary(-1, "head.tanh", h)
	g.drop(h)
	d2 := g.dropout(-1, "head.dropout2", t)
	g.drop(t)
	logits = g.linear(-1, "head.out", d2, g.p(-1, "head.out.weight"), g.p(-1, "head.out.bias"), B, H, L)
	g.drop(d2)
	loss = g.crossEntropy("loss", logits, B, L)
	return loss, logits
}

// layerMaybeCheckpointed runs layer l, under gradient checkpointing as
// torch.utils.checkpoint does: the forward runs without saving anything but
// the layer's input; backward reruns it (graph.go, recompute).
func (g *gen) layerMaybeCheckpointed(l int, x *tensor) *tensor {
	if !g.spec.GradientCheckpointing || g.noGrad > 0 {
		return g.layer(l, x)
	}
	g.keep(x) // saved by the checkpoint function
	saved, ns := [2]*tensor{x}, 1
	if g.relEmb != nil {
		g.keep(g.relEmb)
		saved[1], ns = g.relEmb, 2
	}
	g.noGrad++
	out := g.layer(l, x)
	g.noGrad--
	seg := g.sslab.next()
	*seg = segment{layer: l, in: x, rel: g.relEmb}
	n := g.newNodeSlot()
	*n = node{out: out, saved: g.tensors(saved[:ns]), ckpt: seg}
	g.tape = append(g.tape, n)
	return out
}

func (g *gen) layer(l int, x *tensor) *tensor {
	if g.m.arch() == DecoderLM {
		if g.comp {
			return g.decoderLayerCompiled(l, x)
		}
		return g.decoderLayer(l, x)
	}
	return g.encoderLayer(l, x)
}

// encoderLayer is BertLayer / RobertaLayer / DebertaV2Layer (post-norm).
func (g *gen) encoderLayer(l int, x *tensor) *tensor {
	rows, H, I := g.rows(), u(g.m.Hidden), u(g.m.Intermediate)
	q := g.linear(l, "attention.q", x, g.p(l, "attention.q.weight"), g.p(l, "attention.q.bias"), rows, H, H)
	k := g.linear(l, "attention.k", x, g.p(l, "attention.k.weight"), g.p(l, "attention.k.bias"), rows, H, H)
	v := g.linear(l, "attention.v", x, g.p(l, "attention.v.weight"), g.p(l, "attention.v.bias"), rows, H, H)
	var ctx *tensor
	switch {
	case g.m.arch() == DeBERTa:
		ctx = g.debertaAttention(l, q, k, v)
	case g.sdpa:
		ctx = g.sdpaAttention(l, q, k, v)
	case g.manual:
		ctx = g.manualAttention(l, q, k, v, false)
	default:
		ctx = g.eagerAttention(l, q, k, v, false)
	}
	h1 := g.postNormOutput(l, "attention.output", "attention", ctx, x, H)
	it := g.linear(l, "intermediate", h1, g.p(l, "intermediate.weight"), g.p(l, "intermediate.bias"), rows, H, I)
	ge := g.unary(l, "intermediate.gelu", it)
	g.drop(it)
	return g.postNormOutput(l, "output", "output", ge, h1, I)
}

// postNormOutput is BertSelfOutput and BertOutput alike: the dense layer
// dense (in features to Hidden) on x, dropout, the residual added, and the
// LayerNorm norm+".LayerNorm" after it; x and residual die here.
func (g *gen) postNormOutput(l int, dense, norm string, x, residual *tensor, in uint64) *tensor {
	rows, H := g.rows(), u(g.m.Hidden)
	o := g.linear(l, dense, x, g.p(l, g.cat(dense, ".weight")), g.p(l, g.cat(dense, ".bias")), rows, in, H)
	g.drop(x)
	od := g.dropout(l, g.cat(dense, ".dropout"), o)
	g.drop(o)
	s := g.add(l, g.cat(norm, ".residual"), od, residual)
	g.drop(od)
	g.drop(residual)
	out := g.layerNorm(l, g.cat(norm, ".LayerNorm"), s, g.p(l, g.cat(norm, ".LayerNorm.weight")), g.p(l, g.cat(norm, ".LayerNorm.bias")), rows)
	g.drop(s)
	return out
}

// eagerAttention is the materialised attention of HF's eager
// implementation (and the CS336 one): scores, scaled, masked (fp32: the
// additive mask is fp32), softmax (fp32, saved), dropout, the (16-bit)
// probabilities times values, and the permute-contiguous copy. Each
// batch*heads*seq*seq tensor is one allocation.
func (g *gen) eagerAttention(l int, q, k, v *tensor, causal bool) *tensor {
	BA, SS := g.B*u(g.m.Heads), g.S*g.S
	act := g.act()
	sd := g.attentionScores(l, q, k)
	mbytes := uint8(4)
	if causal {
		mbytes = act // masked_fill / where keeps the dtype
	}
	mk := g.op(l, "attention.masked", BA*SS, mbytes, []*tensor{sd}, 1)
	g.drop(sd)
	pr := g.opSaveOut(l, "attention.probs", BA*SS, 4, mk)
	g.drop(mk)
	g.cost(g.bw(BA * SS * 24))
	return g.attentionContext(l, pr, v, nil, causal)
}

// attentionScores is the start eagerAttention and manualAttention share:
// q times k (one batch*heads*seq*seq tensor, q and k saved and dropped
// here) and the scaled copy, which it returns.
func (g *gen) attentionScores(l int, q, k *tensor) *tensor {
	BA, SS, d := g.B*u(g.m.Heads), g.S*g.S, u(g.m.Hidden/g.m.Heads)
	act := g.act()
	sc := g.op(l, "attention.scores", BA*SS, act, []*tensor{q, k}, 0, q, k)
	g.cost(g.mm(2 * BA * SS * d))
	g.drop(q)
	g.drop(k)
	sd := g.op(l, "attention.scaled", BA*SS, act, []*tensor{sc}, 0)
	g.drop(sc)
	return sd
}

// attentionContext is the end eagerAttention and manualAttention share:
// dropout on the probabilities pr (an encoder's; not when causal), their
// 16-bit copy times v, and the permute-contiguous copy. pr and v die
// here; live (nil for eager) is dropped after v, before the copy: the
// manual attention's masked scores, a Python local until the attention
// function returns.
func (g *gen) attentionContext(l int, pr, v, live *tensor, causal bool) *tensor {
	rows, H := g.rows(), u(g.m.Hidden)
	BA, SS, d := g.B*u(g.m.Heads), g.S*g.S, u(g.m.Hidden/g.m.Heads)
	act := g.act()
	pd := pr
	if !causal {
		pd = g.dropout(l, "attention.dropout", pr)
		g.drop(pr)
	}
	ph := g.toHalf(l, "attention.probs", pd)
	g.drop(pd)
	c := g.op(l, "attention.context", rows*H, act, []*tensor{ph, v}, 0, ph, v)
	g.cost(g.mm(2 * BA * SS * d))
	g.drop(ph)
	g.drop(v)
	g.drop(live) // the attention function returns
	cc := g.op(l, "attention.context.contiguous", rows*H, act, []*tensor{c}, 1)
	g.drop(c)
	return cc
}

// sdpaAttention is F.scaled_dot_product_attention with the memory-efficient
// kernel (what HF's "sdpa" BERT/RoBERTa get with a padding mask and
// dropout): no seq*seq tensor, a logsumexp per row saved, and in backward
// a per-row workspace.
func (g *gen) sdpaAttention(l int, q, k, v *tensor) *tensor {
	rows, H := g.rows(), u(g.m.Hidden)
	BA, d := g.B*u(g.m.Heads), u(g.m.Hidden/g.m.Heads)
	qh, kh, vh := g.toHalf(l, "attention.q", q), g.toHalf(l, "attention.k", k), g.toHalf(l, "attention.v", v)
	g.drop(q)
	g.drop(k)
	g.drop(v)
	out := g.alloc(rows*H, g.act(), l, "attention.sdpa")
	lse := g.alloc(BA*((g.S+31)/32*32), 4, l, "attention.sdpa.logsumexp")
	g.rec(g.site(l, "attention.sdpa.grad"), []*tensor{qh, kh, vh}, 0, out, []*tensor{qh, kh, vh, out, lse}, BA*g.S*4)
	g.cost(g.mm(4 * BA * g.S * g.S * d))
	g.drop(lse)
	g.drop(qh)
	g.drop(kh)
	g.drop(vh)
	cc := g.op(l, "attention.context.contiguous", rows*H, out.bytes, []*tensor{out}, 1)
	g.drop(out)
	return cc
}

// debertaAttention is DisentangledSelfAttention (share_att_key, c2p and
// p2c): contiguous per-head copies of q, k, v; the content scores; the
// relative-position keys and queries projected from the (LayerNormed)
// rel_embeddings and repeated per batch; the c2p and p2c scores gathered
// to seq x seq and scaled; XSoftmax and XDropout (an fp32 bernoulli draw
// and a bool mask).
func (g *gen) debertaAttention(l int, q, k, v *tensor) *tensor {
	rows, H := g.rows(), u(g.m.Hidden)
	BA, SS, d := g.B*u(g.m.Heads), g.S*g.S, u(g.m.Hidden/g.m.Heads)
	R := 2 * u(g.m.PositionBuckets)
	act := g.act()
	contig := func(kind string, x *tensor) *tensor {
		c := g.op(l, kind, x.elems, x.bytes, []*tensor{x}, 1)
		g.drop(x)
		return c
	}
	qc, kc, vc := contig("attention.q.heads", q), contig("attention.k.heads", k), contig("attention.v.heads", v)
	ks := g.op(l, "attention.k.scaled", rows*H, act, []*tensor{kc}, 0)
	sc := g.op(l, "attention.scores", BA*SS, act, []*tensor{qc, ks}, 0, qc, ks)
	g.drop(ks)
	g.cost(g.mm(2 * BA * SS * d))

	posKey := func(kind string, w, b int) *tensor {
		pk := g.linear(l, kind, g.relEmb, w, b, R, H, H)
		pc := contig(g.cat(kind, ".heads"), pk)
		pr := g.op(l, g.cat(kind, ".repeat"), g.B*R*H, pc.bytes, []*tensor{pc}, 0)
		g.drop(pc)
		return pr
	}
	pk := posKey("attention.pos_key", g.p(l, "attention.k.weight"), g.p(l, "attention.k.bias"))
	c2p := g.op(l, "attention.c2p", BA*g.S*R, act, []*tensor{qc, pk}, 0, qc, pk)
	g.drop(pk)
	idx := g.alloc(SS, 8, l, "attention.c2p.index")
	c2pg := g.op(l, "attention.c2p.gather", BA*SS, act, []*tensor{c2p}, 0, idx)
	g.drop(idx)
	g.drop(c2p)
	rel := g.op(l, "attention.c2p.scaled", BA*SS, act, []*tensor{c2pg}, 0)
	g.drop(c2pg)

	pq := posKey("attention.pos_query", g.p(l, "attention.q.weight"), g.p(l, "attention.q.bias"))
	p2c := g.op(l, "attention.p2c", BA*R*g.S, act, []*tensor{pq, kc}, 0, pq, kc)
	g.drop(pq)
	g.drop(qc)
	g.drop(kc)
	idx2 := g.alloc(SS, 8, l, "attention.p2c.index")
	p2cg := g.op(l, "attention.p2c.gather", BA*SS, act, []*tensor{p2c}, 0, idx2)
	g.drop(idx2)
	g.drop(p2c)
	p2cs := g.op(l, "attention.p2c.scaled", BA*SS, act, []*tensor{p2cg}, 0)
	g.drop(p2cg)
	g.cost(g.mm(4 * BA * g.S * R * d))
	// score += p2c / scale: in place into rel.
	g.drop(p2cs)
	tot := g.add(l, "attention.scores_rel", sc, rel)
	g.drop(sc)
	g.drop(rel)

	rmask := g.alloc(g.B*SS, 1, l, "attention.xsoftmax.rmask")
	mf := g.op(l, "attention.masked", BA*SS, tot.bytes, []*tensor{tot}, 1)
	g.drop(tot)
	pr := g.opSaveOut(l, "attention.probs", BA*SS, 4, mf)
	g.drop(mf)
	g.drop(rmask)
	var pd *tensor
	if g.eval {
		pd = pr
	} else {
		draw := g.alloc(BA*SS, 4, l, "attention.xdropout.bernoulli")
		inv := g.alloc(BA*SS, 4, l, "attention.xdropout.keep")
		g.drop(draw)
		mask := g.alloc(BA*SS, 1, l, "attention.xdropout.mask")
		g.drop(inv)
		filled := g.alloc(BA*SS, 4, l, "attention.xdropout.filled")
		pd = g.op(l, "attention.dropout", BA*SS, 4, []*tensor{pr}, 0, mask)
		g.drop(filled)
		g.drop(mask)
		g.drop(pr)
	}
	g.cost(g.bw(BA * SS * 40))
	ph := g.toHalf(l, "attention.probs", pd)
	g.drop(pd)
	c := g.op(l, "attention.context", rows*H, act, []*tensor{ph, vc}, 0, ph, vc)
	g.cost(g.mm(2 * BA * SS * d))
	g.drop(ph)
	g.drop(vc)
	cc := g.op(l, "attention.context.contiguous", rows*H, act, []*tensor{c}, 1)
	g.drop(c)
	return cc
}

func (g *gen) forwardDecoder() (loss, logits *tensor) {
	m, rows, H, V := g.m, g.rows(), u(g.m.Hidden), u(g.m.Vocab)
	x := g.op(-1, "embeddings.token", rows*H, 4, []*tensor{g.ptens[g.p(-1, "embeddings.token")]}, 0)
	g.cost(g.bw(rows * H * 8))
	for l := 0; l < m.Layers; l++ {
		x = g.layerMaybeCheckpointed(l, x)
	}
	if g.comp {
		// The compiled graph ends with the logits; the loss runs eagerly.
		h := g.cNorm(-1, "ln_final", x, g.p(-1, "ln_final.weight"))
		g.drop(x)
		logits = g.cLinear(-1, "lm_head", h, g.p(-1, "lm_head.weight"), rows, H, V)
		g.drop(h)
	} else {
		h := g.rmsNorm(-1, "ln_final", x, g.p(-1, "ln_final.weight"), rows)
		g.drop(x)
		logits = g.linear(-1, "lm_head", h, g.p(-1, "lm_head.weight"), -1, rows, H, V)
		g.drop(h)
	}
	loss = g.crossEntropy("loss", logits, rows, V)
	return loss, logits
}

// decoderLayer is the CS336 TransformerBlock (pre-norm, RoPE, causal
// attention, SwiGLU).
func (g *gen) decoderLayer(l int, x *tensor) *tensor {
	rows, H, I := g.rows(), u(g.m.Hidden), u(g.m.Intermediate)
	h := g.rmsNorm(l, "ln1", x, g.p(l, "ln1.weight"), rows)
	q := g.linear(l, "attention.q", h, g.p(l, "attention.q.weight"), -1, rows, H, H)
	k := g.linear(l, "attention.k", h, g.p(l, "attention.k.weight"), -1, rows, H, H)
	v := g.linear(l, "attention.v", h, g.p(l, "attention.v.weight"), -1, rows, H, H)
	g.drop(h)
	qr := g.rope(l, "attention.q.rope", q)
	g.drop(q)
	kr := g.rope(l, "attention.k.rope", k)
	g.drop(k)
	var ctx *tensor
	switch {
	case g.sdpa:
		ctx = g.sdpaAttention(l, qr, kr, v)
	case g.manual:
		ctx = g.manualAttention(l, qr, kr, v, true)
	default:
		ctx = g.eagerAttention(l, qr, kr, v, true)
	}
	o := g.linear(l, "attention.output", ctx, g.p(l, "attention.output.weight"), -1, rows, H, H)
	g.drop(ctx)
	x2 := g.add(l, "attention.residual", x, o)
	g.drop(o)
	g.drop(x)
	h2 := g.rmsNorm(l, "ln2", x2, g.p(l, "ln2.weight"), rows)
	a := g.linear(l, "ffn.w1", h2, g.p(l, "ffn.w1.weight"), -1, rows, H, I)
	sg := g.unary(l, "ffn.silu.sigmoid", a)
	s := g.op(l, "ffn.silu", a.elems, a.bytes, []*tensor{a, sg}, 0, a, sg)
	g.drop(sg)
	g.drop(a)
	b := g.linear(l, "ffn.w3", h2, g.p(l, "ffn.w3.weight"), -1, rows, H, I)
	g.drop(h2)
	gt := g.op(l, "ffn.gate", s.elems, s.bytes, []*tensor{s, b}, 0, s, b)
	g.drop(s)
	g.drop(b)
	g.cost(g.bw(rows * I * 16))
	y := g.linear(l, "ffn.w2", gt, g.p(l, "ffn.w2.weight"), -1, rows, I, H)
	g.drop(gt)
	x3 := g.add(l, "ffn.residual", x2, y)
	g.drop(y)
	g.drop(x2)
	return x3
}

// rope applies rotary embeddings the way the CS336 code writes them:
// rotate_half (a negated half and the concatenation), x*cos, rot*sin and
// their sum. cos and sin are buffers, so nothing large is saved.
func (g *gen) rope(l int, kind string, x *tensor) *tensor {
	neg := g.op(l, g.cat(kind, ".neg"), x.elems/2, x.bytes, []*tensor{x}, 0)
	rot := g.op(l, g.cat(kind, ".rotate"), x.elems, x.bytes, []*tensor{neg}, 0)
	g.drop(neg)
	a := g.op(l, g.cat(kind, ".cos"), x.elems, x.bytes, []*tensor{x}, 0)
	b := g.op(l, g.cat(kind, ".sin"), x.elems, x.bytes, []*tensor{rot}, 0)
	g.drop(rot)
	y := g.add(l, kind, a, b)
	g.drop(a)
	g.drop(b)
	g.cost(g.bw(x.size() * 8))
	return y
}

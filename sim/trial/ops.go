package trial

// Operators as PyTorch runs them, with autocast's dtype rules: under AMP
// (fp16/bf16) linear layers and matmuls run in 16 bits, casting their
// inputs (activations each call, weights once per autocast region through
// the autocast cache), while layer_norm, softmax and cross_entropy run in
// fp32; an elementwise op keeps its input's dtype and promotes a 16-bit
// and an fp32 input to fp32.

// act is the element size of a matmul output: 2 under AMP, else 4.
func (g *gen) act() uint8 {
	if g.amp {
		return 2
	}
	return 4
}

// toHalf returns x as a 16-bit tensor for a matmul under AMP: x itself
// (with a new reference) when it already is, else a cast copy.
func (g *gen) toHalf(layer int, kind string, x *tensor) *tensor {
	if !g.amp || x.half() {
		g.keep(x)
		return x
	}
	g.cost(g.bw(x.size() * 3 / 2))
	return g.op(layer, g.cat(kind, ".cast"), x.elems, 2, []*tensor{x}, 0)
}

// toFloat is the fp32 cast autocast applies before an fp32-list op.
func (g *gen) toFloat(layer int, kind string, x *tensor) *tensor {
	if x.bytes == 4 {
		g.keep(x)
		return x
	}
	g.cost(g.bw(x.size() * 3))
	return g.op(layer, g.cat(kind, ".cast"), x.elems, 4, []*tensor{x}, 0)
}

// weight returns parameter p as a matmul operand: the fp32 parameter, or
// under AMP its cached 16-bit copy (one per autocast region; the cache
// holds a reference until the region ends).
func (g *gen) weight(p int) *tensor {
	w := g.ptens[p]
	if !g.amp {
		return w
	}
	if c := g.castCache[p]; c != nil {
		g.keep(c)
		return c
	}
	c := g.newTensor(w.elems, 2, g.castSite[p])
	g.rec(g.gradSite[p], []*tensor{w}, 0, c, nil, 0)
	g.keep(c)
	g.castCache[p] = c
	g.castOrder = append(g.castOrder, p)
	g.cost(g.bw(w.size() * 3 / 2))
	return c
}

// clearCastCache ends an autocast region: the cache lets its copies go, in
// the order they were made (a map's order would make the trace random).
func (g *gen) clearCastCache() {
	for _, p := range g.castOrder {
		g.drop(g.castCache[p])
		g.castCache[p] = nil
	}
	g.castOrder = g.castOrder[:0]
}

// linear is F.linear(x, W, b) on rows x in -> rows x out. It saves its
// (cast) input and weight.
func (g *gen) linear(layer int, kind string, x *tensor, w, b int, rows, in, out uint64) *tensor {
	xin := g.toHalf(layer, g.cat(kind, ".input"), x)
	wt := g.weight(w)
	var bt *tensor
	// An array, not an append: a list that may grow goes to the heap.
	ins, n := [3]*tensor{xin, wt}, 2
	if b >= 0 {
		bt = g.weight(b)
		ins[2], n = bt, 3
	}
	y := g.op(layer, kind, rows*out, g.act(), ins[:n], 0, xin, wt)
	g.cost(g.mm(2 * rows * in * out))
	g.drop(xin)
	if g.amp {
		g.drop(wt)
		g.drop(bt)
	}
	return y
}

// dropout is nn.Dropout in training mode: an output and a bool mask (saved).
// In eval mode it is the identity.
func (g *gen) dropout(layer int, kind string, x *tensor) *tensor {
	if g.eval {
		g.keep(x)
		return x
	}
	mask := g.alloc(x.elems, 1, layer, g.cat(kind, ".mask"))
	y := g.op(layer, kind, x.elems, x.bytes, []*tensor{x}, 0, mask)
	g.drop(mask)
	g.cost(g.bw(x.size()*2 + x.elems))
	return y
}

// add is a residual addition; the result is fp32 when either input is.
// Both inputs receive the output's gradient when their dtypes match.
func (g *gen) add(layer int, kind string, a, b *tensor) *tensor {
	bytes := a.bytes
	if b.bytes > bytes {
		bytes = b.bytes
	}
	y := g.op(layer, kind, a.elems, bytes, []*tensor{a, b}, 3)
	g.cost(g.bw(a.size() + b.size() + a.elems*uint64(bytes)))
	return y
}

// layerNorm is F.layer_norm in fp32 (autocast's fp32 list): it saves its
// input, the per-row mean and rstd.
func (g *gen) layerNorm(layer int, kind string, x *tensor, w, b int, rows uint64) *tensor {
	xf := g.toFloat(layer, g.cat(kind, ".input"), x)
	mean := g.alloc(rows, 4, layer, g.cat(kind, ".mean"))
	rstd := g.alloc(rows, 4, layer, g.cat(kind, ".rstd"))
	ins, n := [3]*tensor{xf, g.ptens[w]}, 2
	if b >= 0 {
		ins[2], n = g.ptens[b], 3
	}
	y := g.op(layer, kind, x.elems, 4, ins[:n], 0, xf, mean, rstd)
	g.drop(mean)
	g.drop(rstd)
	g.drop(xf)
	g.cost(g.bw(x.elems * 12))
	return y
}

// rmsNorm is the CS336/Llama RMSNorm written in PyTorch ops: x*x (a
// temporary), the mean and rsqrt per row, x*rstd (saved) and *weight.
func (g *gen) rmsNorm(layer int, kind string, x *tensor, w int, rows uint64) *tensor {
	xf := g.toFloat(layer, g.cat(kind, ".input"), x)
	sq := g.alloc(xf.elems, 4, layer, g.cat(kind, ".square"))
	ms := g.op(layer, g.cat(kind, ".mean"), rows, 4, []*tensor{xf}, 0, xf)
	g.drop(sq)
	rs := g.op(layer, g.cat(kind, ".rsqrt"), rows, 4, []*tensor{ms}, 0, ms)
	g.drop(ms)
	xn := g.op(layer, g.cat(kind, ".normed"), xf.elems, 4, []*tensor{xf, rs}, 0, xf, rs)
	g.drop(rs)
	g.drop(xf)
	y := g.op(layer, kind, xn.elems, 4, []*tensor{xn, g.ptens[w]}, 0, xn)
	g.drop(xn)
	g.cost(g.bw(x.elems * 20))
	return y
}

// unary is an elementwise op that saves its input (GELU, tanh, SiLU's
// parts): same dtype out.
func (g *gen) unary(layer int, kind string, x *tensor) *tensor {
	y := g.op(layer, kind, x.elems, x.bytes, []*tensor{x}, 0, x)
	g.cost(g.bw(x.size() * 2))
	return y
}

// crossEntropy is F.cross_entropy on rows x classes logits (fp32 list): a
// log_softmax (saved) and the nll loss scalar.
func (g *gen) crossEntropy(kind string, logits *tensor, rows, classes uint64) *tensor {
	lf := g.toFloat(-1, g.cat(kind, ".logits"), logits)
	ls := g.opSaveOut(-1, g.cat(kind, ".log_softmax"), rows*classes, 4, lf)
	g.drop(lf)
	loss := g.op(-1, g.cat(kind, ".nll"), 1, 4, []*tensor{ls}, 0)
	g.drop(ls)
	g.cost(g.bw(rows * classes * 12))
	return loss
}

// opSaveOut is an op whose backward needs its own output (softmax,
// log_softmax).
func (g *gen) opSaveOut(layer int, kind string, elems uint64, bytes uint8, x *tensor) *tensor {
	out := g.alloc(elems, bytes, layer, kind)
	g.rec(g.site(layer, g.cat(kind, ".grad")), []*tensor{x}, 0, out, []*tensor{out}, 0)
	return out
}

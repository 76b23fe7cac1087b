package trial

// manualAttention is attention written by hand in tensor ops, softmax
// included, as the CS336 Transformer LM writes it (Attention "manual"; a
// hand-written attention around F.softmax, like nanoGPT's non-flash path,
// is eagerAttention):
//
//	scores = einsum(q, k) / sqrt(d)            two seq*seq tensors, the first a temporary
//	scores = torch.where(mask, scores, -inf)   a bool mask per layer, saved by where
//	softmax: m = scores.max(-1, keepdim)       values and int64 indices (saved) per row
//	         e = exp(scores - m)               the difference a temporary; e saved
//	         p = e / e.sum(-1, keepdim)        p and the row sums saved
//	out = einsum(p, v)
//
// Against F.softmax (eagerAttention, which saves only its output), autograd
// keeps two seq*seq tensors per layer (exp and the probabilities) and the
// per-row sums and argmax indices, and the forward has up to five seq*seq
// tensors in flight. Under autocast exp, sum and the division run in fp32
// (exp is on autocast's fp32 list: its 16-bit input is cast first), the
// probabilities are cast back to 16 bits for the matmul, which saves that
// copy. The difference stays alive until softmax returns and the masked
// scores until the attention function returns, as Python locals.
func (g *gen) manualAttention(l int, q, k, v *tensor, causal bool) *tensor {
	BA, SS := g.B*u(g.m.Heads), g.S*g.S
	BAS := BA * g.S
	act := g.act()
	// The causal mask is built per layer (torch.triu or an arange
	// comparison, seq x seq bool); an encoder's is the padding mask
	// compared to zero (batch x seq bool).
	maskElems := g.B * g.S
	if causal {
		maskElems = SS
	}
	mask := g.alloc(maskElems, 1, l, "attention.mask")
	sd := g.attentionScores(l, q, k)
	mk := g.op(l, "attention.masked", BA*SS, act, []*tensor{sd}, 0, mask)
	g.drop(sd)
	g.drop(mask)

	mx := g.alloc(BAS, act, l, "attention.softmax.max")
	idx := g.alloc(BAS, 8, l, "attention.softmax.argmax")
	g.rec(g.site(l, "attention.softmax.max.grad"), []*tensor{mk}, 0, mx, []*tensor{idx}, 0)
	g.drop(idx)
	sh := g.op(l, "attention.softmax.shifted", BA*SS, act, []*tensor{mk, mx}, 1)
	g.drop(mx)
	shf := g.toFloat(l, "attention.softmax.shifted", sh)
	ex := g.opSaveOut(l, "attention.softmax.exp", BA*SS, shf.bytes, shf)
	g.drop(shf)
	sm := g.op(l, "attention.softmax.sum", BAS, ex.bytes, []*tensor{ex}, 0)
	// The division's backward (derivatives.yaml, div.Tensor) computes the
	// row sums' gradient as -grad * ((self / other) / other): four seq*seq
	// temporaries alive together (C++ keeps an expression's temporaries to
	// its end) beside the incoming gradient and exp's: the backward's
	// highest point, which the real CS336 trace shows.
	pr := g.alloc(BA*SS, ex.bytes, l, "attention.probs")
	g.rec(g.site(l, "attention.probs.grad"), []*tensor{ex, sm}, 0, pr, []*tensor{ex, sm}, 4*BA*SS*uint64(ex.bytes))
	g.drop(ex)
	g.drop(sm)
	g.drop(sh) // softmax returns
	g.cost(g.bw(BA * SS * 40))

	return g.attentionContext(l, pr, v, mk, causal)
}

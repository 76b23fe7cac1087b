package trial

// The optimizer step as HF Trainer runs it: GradScaler.unscale_ (fp16),
// clip_grad_norm_, optimizer.step(), model.zero_grad(set_to_none=True)
// (or, with KeepGrads, a zero_grad that keeps the buffers).

func (g *gen) optimizerStep() {
	// An array, not an append: a list that may grow goes to the heap.
	var scaler [2]*tensor
	if g.spec.precision() == FP16 {
		scaler = [2]*tensor{g.alloc(1, 4, -1, "scaler.inv_scale"), g.alloc(1, 4, -1, "scaler.found_inf")}
		g.cost(g.bw(g.gradBytes * 2))
	}
	g.clipGradNorm()
	g.optStep++
	gs := g.tables.groups
	switch g.spec.optimizer() {
	case AdamW, AdamWFused, AdamWLoop:
		for _, grp := range gs {
			g.adamwGroup(grp)
		}
	case SGD:
		g.cost(g.bw(g.gradBytes * 3))
	}
	for _, t := range scaler {
		if t != nil {
			g.free(t)
		}
	}
	// zero_grad(set_to_none=True): the gradients go. With KeepGrads
	// (set_to_none=False, or no zero_grad) they are zeroed in place
	// (_foreach_zero_, no allocation) or left as they are: the buffers stay,
	// the next backward adds into them (graph.go, accumulate).
	if g.spec.KeepGrads {
		return
	}
	for i, t := range g.pgrad {
		if t != nil {
			g.free(t)
			g.pgrad[i] = nil
		}
	}
	g.gradBytes = 0
}

// clipGradNorm is torch.nn.utils.clip_grad_norm_ with foreach: a norm per
// gradient, stacked, the total norm, the clip coefficient clamped; the
// gradients are scaled in place.
func (g *gen) clipGradNorm() {
	// The lists of this file reuse one buffer of the generator: one list
	// per step and group was a heap allocation each.
	norms := g.scratch[:0]
	defer func() { g.scratch = norms[:0] }()
	for _, t := range g.pgrad {
		if t != nil {
			norms = append(norms, g.alloc(1, 4, -1, "clip_grad_norm.norm"))
		}
	}
	if len(norms) == 0 {
		return
	}
	st := g.alloc(uint64(len(norms)), 4, -1, "clip_grad_norm.stack")
	total := g.alloc(1, 4, -1, "clip_grad_norm.total")
	g.free(st)
	for _, t := range norms {
		g.free(t)
	}
	coef := g.alloc(1, 4, -1, "clip_grad_norm.coef")
	clamped := g.alloc(1, 4, -1, "clip_grad_norm.coef_clamped")
	g.free(coef)
	g.cost(g.bw(g.gradBytes * 2))
	g.free(clamped)
	g.free(total)
}

// adamwGroup is one parameter group's AdamW update. torch creates the
// state lazily at the first step, per parameter in order (exp_avg then
// exp_avg_sq; fused also puts the step counter on the device).
func (g *gen) adamwGroup(grp []int) {
	if len(g.optState) == 0 {
		g.optState = zeroed(g.optState, 3*len(g.params))
	}
	opt := g.spec.optimizer()
	for _, i := range grp {
		if g.pgrad[i] == nil || g.optState[3*i] != nil {
			continue
		}
		n := g.params[i].elems
		g.optState[3*i] = g.alloc(n, 4, g.params[i].site.layer, "optimizer.exp_avg")
		g.optState[3*i+1] = g.alloc(n, 4, g.params[i].site.layer, "optimizer.exp_avg_sq")
		if opt == AdamWFused {
			g.optState[3*i+2] = g.alloc(1, 4, -1, "optimizer.step")
		}
	}
	var bytes uint64
	for _, i := range grp {
		if g.pgrad[i] != nil {
			bytes += 4 * g.params[i].elems
		}
	}
	switch opt {
	case AdamW:
		// exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one
		// temporary per tensor, all alive until the addcdiv_.
		tmp := g.scratch[:0]
		defer func() { g.scratch = tmp[:0] }()
		for _, i := range grp {
			if g.pgrad[i] != nil {
				tmp = append(tmp, g.alloc(g.params[i].elems, 4, g.params[i].site.layer, "optimizer.exp_avg_sq_sqrt"))
			}
		}
		g.cost(g.bw(bytes * 9))
		for _, t := range tmp {
			g.free(t)
		}
	case AdamWLoop:
		// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
		for _, i := range grp {
			if g.pgrad[i] == nil {
				continue
			}
			n, l := g.params[i].elems, g.params[i].site.layer
			sq := g.alloc(n, 4, l, "optimizer.exp_avg_sq_sqrt")
			den := g.alloc(n, 4, l, "optimizer.denom")
			g.free(sq)
			g.cost(g.bw(4 * n * 9))
			g.free(den)
		}
	default:
		g.cost(g.bw(bytes * 7))
	}
}

package par

import "math"

// zFor is the standard normal quantile of c: the z of a one-sided bound at
// confidence c.
func zFor(c float64) float64 { return math.Sqrt2 * math.Erfinv(2*c-1) }

// wilsonUpper is the one-sided Wilson score upper bound, at confidence c, of
// a probability observed as k successes in n trials: the p for which k/n
// sits z standard errors below p, solved with p's own variance p(1-p)/n.
// Unlike k/n + z·sqrt(k/n·(1-k/n)/n) it is not 0 when k is 0, which is the
// case that matters here: no OOM in n mixes does not prove P(OOM) = 0.
func wilsonUpper(k, n int, c float64) float64 {
	if n == 0 {
		return 1
	}
	z := zFor(c)
	nf := float64(n)
	p := float64(k) / nf
	z2 := z * z
	centre := p + z2/(2*nf)
	spread := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	u := (centre + spread) / (1 + z2/nf)
	return math.Min(u, 1)
}

// mixesNeeded is the fewest mixes with no OOM whose Wilson upper bound is
// below 1 - c: z²/(n + z²) < 1 - c.
func mixesNeeded(c float64) int {
	z2 := zFor(c) * zFor(c)
	return int(math.Floor(z2*c/(1-c))) + 1
}

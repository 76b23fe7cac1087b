package par

import (
	"math/rand/v2"

	"github.com/memreplay/memreplay/sim/trial"
	"github.com/memreplay/memreplay/trace"
)

// FromSpecs turns a sampler of trial hyperparameters (sim/study's
// Space.Sample) into the workload's sampler: each draw's events come from
// sim/trial's model, generated afresh every time the trial runs (its reader
// holds O(layers) state, so a mix of long trials costs little memory).
// steps, when positive, replaces every Spec's Steps, to make a search
// faster: a trial's shapes (and so most of its peak) show in its first
// optimizer steps. With dynamic padding, fewer steps also draw fewer batch
// lengths, and so fragment a long-lived cache less: a shortened search can
// be optimistic. Durations shrink with the steps, which the throughput
// figures then describe.
func FromSpecs(sample func(rng *rand.Rand) trial.Spec, steps int) func(rng *rand.Rand) Trial {
	return func(rng *rand.Rand) Trial {
		s := sample(rng)
		if steps > 0 {
			s.Steps = steps
		}
		return Trial{
			Label:    s.String(),
			Open:     func() (trace.Reader, error) { return s.Reader() },
			Duration: s.Duration(),
		}
	}
}

package trial

import "math/rand/v2"

// The schedule is the trial's list of phases. Both the reader (which
// generates each phase's events) and Duration (which only adds up phase
// times) walk it, so they agree to the microsecond.

type phaseKind uint8

const (
	phLoad phaseKind = iota
	phMicro
	phOptim
	phEval
	phTeardown
)

type phase struct {
	kind  phaseKind
	step  int // 1-based optimizer step (eval: the step it follows)
	index int // micro-batch or eval batch within its step/pass, 1-based
	last  bool
	seq   int // the batch's padded length
}

type schedule struct {
	s                     Spec
	pcg                   rand.PCG
	rng                   *rand.Rand // reads pcg
	st, step, micro, eidx int
}

func newSchedule(s Spec) *schedule {
	sc := &schedule{}
	sc.reset(s)
	return sc
}

// reset starts the schedule of s; a reused schedule reseeds its generator
// in place (a Rand holds nothing but its source).
func (sc *schedule) reset(s Spec) {
	rng := sc.rng
	*sc = schedule{s: s, step: 1, micro: 1}
	sc.pcg.Seed(s.Seed, 0x7431a1)
	if rng == nil {
		rng = rand.New(&sc.pcg)
	}
	sc.rng = rng
}

// seqLen draws a batch's padded length: SeqLen, or with dynamic padding a
// length in [SeqLen/2, SeqLen] rounded up to a multiple of 8.
func (sc *schedule) seqLen() int {
	n := sc.s.SeqLen
	if !sc.s.DynamicPadding || n < 2 {
		return n
	}
	lo := (n + 1) / 2
	v := lo + sc.rng.IntN(n-lo+1)
	v = (v + 7) &^ 7
	if v > n {
		v = n
	}
	return v
}

func (sc *schedule) next() (phase, bool) {
	s := sc.s
	for {
		switch sc.st {
		case 0:
			sc.st = 1
			return phase{kind: phLoad}, true
		case 1:
			if sc.step > s.steps() {
				if s.EvalEvery == 0 { // the one pass at the end
					sc.st, sc.eidx = 3, 1
				} else {
					sc.st = 4
				}
				continue
			}
			p := phase{kind: phMicro, step: sc.step, index: sc.micro, last: sc.micro == s.gradAccum(), seq: sc.seqLen()}
			sc.micro++
			if sc.micro > s.gradAccum() {
				sc.st = 2
			}
			return p, true
		case 2:
			p := phase{kind: phOptim, step: sc.step}
			if s.EvalEvery > 0 && sc.step%s.EvalEvery == 0 {
				sc.st, sc.eidx = 3, 1
			} else {
				sc.st, sc.step, sc.micro = 1, sc.step+1, 1
			}
			return p, true
		case 3:
			step := sc.step
			if step > s.steps() {
				step = s.steps()
			}
			p := phase{kind: phEval, step: step, index: sc.eidx, last: sc.eidx == s.evalBatches(), seq: sc.seqLen()}
			sc.eidx++
			if sc.eidx > s.evalBatches() {
				if sc.step > s.steps() {
					sc.st = 4
				} else {
					sc.st, sc.step, sc.micro = 1, sc.step+1, 1
				}
			}
			return p, true
		case 4:
			sc.st = 5
			return phase{kind: phTeardown}, true
		default:
			return phase{}, false
		}
	}
}

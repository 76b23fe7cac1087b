package allocator

// stepDetector is the online step detector of the lifetime and plan
// policies: it follows the allocated bytes and finds the troughs between
// training steps (policy_lifetime.go's "Steps" says how). The two policies
// differ only in the thresholds, which are fields here.
type stepDetector struct {
	// A fall to within swing/troughDiv of the base is a trough.
	troughDiv int64
	// A rise from the trough's lowest point by more than swing/riseDiv
	// starts the next step.
	riseDiv int64
	// followBase: before a trough the base follows the bytes down (a
	// program whose first free comes at its first peak would otherwise
	// keep a base that no step falls back to).
	followBase bool
	// riseFromLo: the swing of the rise test is the fall from the high to
	// the trough's lowest point rather than to the base.
	riseFromLo bool

	started bool  // a block was freed: the load phase is over, base is set
	low     bool  // at a trough
	base    int64 // the allocated bytes of the last trough
	hi, lo  int64 // the highest since the base; the lowest in the trough
	fall    int64 // at stepRise: the swing the rise was measured against
}

// stepEvent is what one track call found.
type stepEvent uint8

const (
	stepNone   stepEvent = iota
	stepTrough           // a trough was reached; lo is cur
	stepLower            // a new lowest point in the trough; lo is cur
	stepRise             // the next step began from the trough: base is its lowest point
)

// track follows the allocated bytes cur after an operation (free: it was
// a free).
func (d *stepDetector) track(cur int64, free bool) stepEvent {
	switch {
	case !d.started:
		if free {
			d.started, d.base, d.hi = true, cur, cur
		}
	case !d.low:
		if d.followBase {
			d.base = min(d.base, cur)
		}
		swing := d.hi - d.base
		if cur > d.hi {
			d.hi = cur
		} else if swing > max(d.base/32, 2<<20) && cur-d.base <= swing/d.troughDiv {
			d.low, d.lo = true, cur
			return stepTrough
		}
	default:
		ev := stepNone
		if cur < d.lo {
			d.lo = cur
			ev = stepLower
		}
		swing := d.hi - d.base
		if d.riseFromLo {
			swing = d.hi - d.lo
		}
		if cur-d.lo > swing/d.riseDiv {
			d.low, d.base, d.hi, d.fall = false, d.lo, cur, swing
			return stepRise
		}
		return ev
	}
	return stepNone
}

package allocator

import "github.com/memreplay/memreplay/allocator/config"

// The lifetime policy: long-lived blocks in pools of their own.
//
// A training job's memory is of two lifetimes. Weights, optimizer state
// and, often, gradients live across steps; activations and temporaries are
// born and die within one. PyTorch's pools mix them: a weight allocated
// into the free tail of a segment that otherwise held activations keeps the
// whole segment reserved after the activations are gone, and a free hole
// between two long-lived blocks can only serve requests that fit it. The
// lifetime policy keeps two more pools, one small and one large, for blocks
// it predicts to be long-lived; their segments (or, with expandable
// segments, their reservations) never hold a transient block, so transient
// segments empty completely at the end of each step and long-lived segments
// stay dense.
//
// The prediction is online: it uses only what the allocator has seen so
// far, the sizes and order of requests, so that a replay does not peek at
// the future and the plug-in can run it inside PyTorch.
//
// Steps. The allocator sees no step markers, so it finds the steps in the
// allocated bytes themselves: a training step rises from a trough (the
// long-lived state) to a peak (activations) and falls back. The first free
// ends the load phase and sets the base, the level of the trough. From the
// base the bytes rise to a high; when they fall back to within a quarter of
// the way from the base to the high, a trough is reached and the epoch
// advances; when they rise again from the trough's lowest point by half
// the last swing, a new step has begun and that lowest point is the new
// base. Temporaries freed inside a step do not bring the bytes back near
// the base, so the epoch advances about once per step. A swing smaller
// than 2 MiB or 1/32 of the base is noise and no trough.
//
// Votes. Every block records the epoch it was handed out in. When the
// program frees it, it votes for its size class (the rounded size): long
// when it lived across at least one trough, short otherwise.
//
// Prediction. A request is long-lived when
//
//  1. no trough has been passed yet (epoch 0: loading the model, and the
//     blocks a replay places before a partial trace's first event), or
//  2. its size class has votes and most are long, or
//  3. its size class has no votes but has live blocks in a long-lived pool
//     (the optimizer state allocated beside the weights of the same
//     shapes, before any block of that size was ever freed).
//
// Everything else is transient, and a transient request that finds no free
// block in its pool may take one from the long-lived pool of its size
// before the pool grows: a long-lived segment stays reserved whatever fills
// its holes, so a transient block there pins nothing more, while a
// long-lived block in a transient segment is what the policy prevents.
//
// A wrong guess costs memory or device
// calls, never correctness: both kinds of pool are ordinary PyTorch pools
// (best fit, split, merge, the fallback chain, empty_cache), and a block is
// freed into the pool it came from. A long-lived pool caches nothing: a
// segment of it that becomes wholly free goes back to the device at once
// (with expandable segments, its whole free pages are unmapped), so that
// blocks wrongly predicted long-lived (the first step's activations, which
// come before any trough) do not keep memory reserved that the transient
// pool then reserves again.
//
// Costs. Device calls only for the releases above (a cudaFree, or an
// unmap, per long-lived segment that empties); two more pools mean more
// segments (or
// two more expandable reservations of 1.125 x the device per stream, in
// address space only). Per malloc: a lookup of the size class in an
// open-addressing table (a multiply, a shift, usually one probe), a few
// comparisons for the zigzag; per free, the vote. A new size class
// allocates its entry once, so steady state allocates nothing.
//
// The code follows the same words: lifetimeState.track finds the troughs,
// lifetimeState.freed the vote, choosePool the prediction, borrow the
// transient request served from a long-lived hole, releaseLong the
// long-lived pool that caches nothing, and the class table is lifeTable.

// Lifetime keeps long-lived blocks apart from transient ones. Sizes are
// PyTorch's.
type Lifetime struct{ PyTorch }

// Name implements Policy.
func (Lifetime) Name() string { return "lifetime" }

func (Lifetime) engine(a *Allocator, _ *config.Config) error {
	a.longSmall = pool{small: true, long: true, statIdx: StatSmall, free: a.newFreeSet()}
	a.longLarge = pool{long: true, statIdx: StatLarge, free: a.newFreeSet()}
	a.pools = []*pool{&a.large, &a.longLarge, &a.small, &a.longSmall}
	a.life = &lifetimeState{steps: stepDetector{troughDiv: 4, riseDiv: 2}}
	a.life.classes.init()
	return nil
}

// lifeClass is what the policy knows of one rounded size.
type lifeClass struct {
	size        uint64
	long, short uint32 // votes of freed blocks
	liveLong    int32  // blocks of this size live in a long-lived pool
}

type lifetimeState struct {
	epoch   uint32 // troughs passed
	steps   stepDetector
	classes lifeTable
}

// track follows the allocated bytes cur after an operation.
func (l *lifetimeState) track(cur int64, free bool) {
	if l.steps.track(cur, free) == stepTrough {
		l.epoch++
	}
}

// choosePool is the prediction: it moves the request to the long-lived
// pool of its size when it predicts a long life, and says so.
func (l *lifetimeState) choosePool(a *Allocator, p *params) bool {
	long := l.epoch == 0
	if !long {
		c := l.classes.get(p.size)
		switch {
		case c == nil:
		case c.long+c.short > 0:
			long = c.long > c.short
		default:
			long = c.liveLong > 0
		}
	}
	if long {
		if p.pool.small {
			p.pool = &a.longSmall
		} else {
			p.pool = &a.longLarge
		}
	}
	return long
}

// borrow serves a transient request from a free block of the long-lived
// pool of its size, when the transient pool has none: a long-lived segment
// stays reserved whatever fills its holes, so a transient block there pins
// nothing that was not pinned, and the transient pool need not grow. The
// converse, a long-lived block in a transient segment, is what the policy
// exists to prevent.
func (l *lifetimeState) borrow(a *Allocator, p *params) *Block {
	lp := *p
	lp.pool = &a.longLarge
	if p.pool.small {
		lp.pool = &a.longSmall
	}
	b := a.getFreeBlock(&lp)
	if b != nil {
		*p = lp
	}
	return b
}

// allocated stamps a handed-out block with its epoch, the class of its
// rounded size and the prediction (a transient block borrowed from a
// long-lived pool is not counted as long-lived).
func (l *lifetimeState) allocated(a *Allocator, b *Block, size uint64, long bool) {
	c := l.classes.get(size)
	if c == nil {
		c = l.classes.add(size)
	}
	b.born, b.class, b.lifeLong = l.epoch, c, long
	if long {
		c.liveLong++
	}
	l.track(a.stats.AllocatedBytes[StatAll].Current, false)
}

// freed is the vote of a block the program frees.
func (l *lifetimeState) freed(a *Allocator, b *Block) {
	if c := b.class; c != nil {
		if l.epoch > b.born {
			c.long++
		} else {
			c.short++
		}
		if b.lifeLong {
			c.liveLong--
		}
		b.class = nil
	}
	l.track(a.stats.AllocatedBytes[StatAll].Current, true)
}

// releaseLong returns the free block b of a long-lived pool to the device
// when it is a whole segment, or unmaps its whole pages: a long-lived pool
// caches nothing, so that blocks predicted long-lived that died young leave
// no reserved memory behind for the transient pool to duplicate.
func (a *Allocator) releaseLong(b *Block) error {
	if !b.expandable() {
		if b.isSplit() {
			return nil
		}
		return a.releaseBlock(b)
	}
	if err := a.unmapBlock(b); err != nil {
		return err
	}
	if !b.mapped && !b.isSplit() {
		return a.releaseExpandableSegment(b)
	}
	return nil
}

// lifeTable maps rounded sizes to their classes: open addressing with
// linear probing, kept at most half full. Classes are allocated one by one
// so that blocks may point at them across a rehash.
type lifeTable struct {
	slots []*lifeClass
	shift uint
	n     int
}

func (t *lifeTable) init() {
	t.slots = make([]*lifeClass, 64)
	t.shift = 64 - 6
}

func (t *lifeTable) home(size uint64) uint64 {
	return ((size >> 9) * 0x9E3779B97F4A7C15) >> t.shift
}

func (t *lifeTable) get(size uint64) *lifeClass {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(size); ; i = (i + 1) & mask {
		c := t.slots[i]
		if c == nil || c.size == size {
			return c
		}
	}
}

func (t *lifeTable) add(size uint64) *lifeClass {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]*lifeClass, 2*len(old))
		t.shift--
		t.n = 0
		for _, c := range old {
			if c != nil {
				t.insert(c)
			}
		}
	}
	c := &lifeClass{size: size}
	t.insert(c)
	return c
}

func (t *lifeTable) insert(c *lifeClass) {
	mask := uint64(len(t.slots) - 1)
	i := t.home(c.size)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = c
	t.n++
}

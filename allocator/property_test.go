package allocator_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// The property test and the fuzz target drive one allocator with random
// sequences of malloc, free, record_stream, event completion, empty_cache
// and settings changes, with the allocator's invariant checks on after every
// operation (blocks tile segments, free sets hold exactly the free mapped
// blocks, statistics equal a recomputation from the blocks), and check from
// outside that:
//   - no two live blocks overlap and each is at least as large as asked;
//   - the device never holds more than its capacity;
//   - an out-of-memory error is raised only when the device (or the memory
//     fraction) really could not supply the segment after the cache was
//     released.

var propertyConfs = []string{
	"",
	"expandable_segments:True",
	"max_split_size_mb:40",
	"max_split_size_mb:40,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
	"roundup_power2_divisions:[1:4,64:8,>:2]",
	"expandable_segments:True,max_split_size_mb:40",
	"garbage_collection_threshold:0.5,per_process_memory_fraction:0.7",
}

// op is one step; the driver interprets it against the current state.
type op struct {
	kind   uint8 // see driver.step
	size   uint64
	pick   uint32 // which live block
	stream uint8
}

type driver struct {
	t     testing.TB
	gpu   *gpu.GPU
	proc  *gpu.Process
	a     *allocator.Allocator
	cfg   config.Config
	live  []*allocator.Block
	steps int
}

// simAllocator returns an allocator with the settings conf on a new process
// of a new simulated GPU.
func simAllocator(tb testing.TB, o gpu.Options, conf string, opts ...allocator.Option) (*gpu.GPU, *gpu.Process, *allocator.Allocator, config.Config) {
	tb.Helper()
	card, err := gpu.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	proc, err := card.NewProcess()
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Parse(conf)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := allocator.New(proc, cfg, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return card, proc, a, cfg
}

// propertyPolicies are the policies every test of this file runs under.
var propertyPolicies = allocator.PolicyNames()

func newDriver(t testing.TB, conf, policy string, capacity uint64, opts ...allocator.Option) *driver {
	pol, err := allocator.NewPolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]allocator.Option{allocator.WithInvariantChecks(), allocator.WithPolicy(pol)}, opts...)
	card, proc, a, _ := simAllocator(t, gpu.Options{Capacity: capacity, NoContextOverhead: true}, conf, opts...)
	// The policy may have changed the settings (stitch turns expandable
	// segments on).
	return &driver{t: t, gpu: card, proc: proc, a: a, cfg: a.Config()}
}

func (d *driver) step(o op) {
	d.steps++
	switch o.kind % 16 {
	case 0, 1, 2, 3, 4, 5, 6:
		d.malloc(o.size, allocator.Stream(o.stream%3))
	case 7, 8, 9, 10, 11:
		d.free(o.pick)
	case 12:
		if len(d.live) > 0 {
			b := d.live[int(o.pick)%len(d.live)]
			if err := d.a.RecordStream(b, allocator.Stream(o.stream%4)); err != nil {
				d.t.Fatalf("step %d: record_stream: %v", d.steps, err)
			}
		}
	case 13:
		if o.pick%2 == 0 {
			d.proc.CompleteAllEvents()
		} else {
			d.proc.CompleteEvents(allocator.Stream(o.stream % 4))
		}
		if err := d.a.ProcessEvents(); err != nil {
			d.t.Fatalf("step %d: process_events: %v", d.steps, err)
		}
	case 14:
		if o.pick%4 == 0 {
			if err := d.a.EmptyCache(); err != nil {
				d.t.Fatalf("step %d: empty_cache: %v", d.steps, err)
			}
		} else {
			d.malloc(o.size%(2<<20)+1, allocator.Stream(o.stream%3))
		}
	case 15:
		// Toggle expandable segments at run time now and then, which
		// exercises best fit's skipping of expandable blocks.
		if o.pick%8 == 0 {
			c := d.cfg
			c.ExpandableSegments = !c.ExpandableSegments
			if err := d.a.SetConfig(c); err == nil {
				d.cfg = c
			}
		} else {
			d.free(o.pick)
		}
	}
	if used, capacity := d.gpu.Used(), d.gpu.Capacity(); used > capacity {
		d.t.Fatalf("step %d: device holds %d of %d bytes", d.steps, used, capacity)
	}
}

func (d *driver) malloc(size uint64, s allocator.Stream) {
	b, err := d.a.Malloc(size, s)
	if err != nil {
		var oom *allocator.OutOfMemoryError
		if !errors.As(err, &oom) {
			d.t.Fatalf("step %d: malloc(%d): %v", d.steps, size, err)
		}
		d.checkOOM(oom)
		return
	}
	if b.Size() < size || b.RequestedSize() != size || b.Stream() != s {
		d.t.Fatalf("step %d: malloc(%d, %d) gave a block of %d for %d on %d",
			d.steps, size, s, b.Size(), b.RequestedSize(), b.Stream())
	}
	for _, o := range d.live {
		if b.Addr() < o.Addr()+o.Size() && o.Addr() < b.Addr()+b.Size() {
			d.t.Fatalf("step %d: block %#x+%d overlaps live block %#x+%d", d.steps, b.Addr(), b.Size(), o.Addr(), o.Size())
		}
	}
	d.live = append(d.live, b)
}

// checkOOM: after the whole cache was released, a cudaMalloc segment fails
// only if the device has less free memory than the segment, or the memory
// fraction forbids it.
func (d *driver) checkOOM(e *allocator.OutOfMemoryError) {
	if d.cfg.ExpandableSegments {
		return // pages, not segments: the amount needed depends on the layout
	}
	if e.Limited {
		if e.Reserved+e.AllocSize <= e.Allowed && e.DeviceFree >= e.AllocSize {
			d.t.Fatalf("step %d: OOM for %d with %d reserved under a limit of %d and %d free on the device",
				d.steps, e.AllocSize, e.Reserved, e.Allowed, e.DeviceFree)
		}
		return
	}
	if e.DeviceFree >= e.AllocSize {
		d.t.Fatalf("step %d: OOM for a %d segment with %d free on the device", d.steps, e.AllocSize, e.DeviceFree)
	}
}

func (d *driver) free(pick uint32) {
	if len(d.live) == 0 {
		return
	}
	i := int(pick) % len(d.live)
	b := d.live[i]
	d.live[i] = d.live[len(d.live)-1]
	d.live = d.live[:len(d.live)-1]
	if err := d.a.Free(b); err != nil {
		d.t.Fatalf("step %d: free: %v", d.steps, err)
	}
}

// randomSize mixes the three size classes the allocator treats differently.
func randomSize(r *rand.Rand) uint64 {
	switch r.IntN(10) {
	case 0, 1, 2, 3:
		return uint64(r.IntN(1<<20)) + 1 // small pool
	case 4, 5, 6:
		return uint64(r.IntN(9<<20)) + 1<<20 // 20 MiB segments
	case 7, 8:
		return uint64(r.IntN(60<<20)) + 10<<20 // rounded to 2 MiB
	default:
		// exact repeats of a few sizes, as training loops make
		return []uint64{4096, 1 << 20, 3 << 20, 25 << 20}[r.IntN(4)]
	}
}

func TestPropertyRandomSequences(t *testing.T) {
	eachPropertyCase(t, 3, 3000, 500, propertyRun)
}

// eachPropertyCase runs run as a subtest for every policy and setting of
// this file and the first seeds, steps steps long (short in -short mode).
func eachPropertyCase(t *testing.T, seeds uint64, steps, short int,
	run func(t *testing.T, policy, conf string, ci int, seed uint64, steps int)) {
	if testing.Short() {
		steps = short
	}
	for _, policy := range propertyPolicies {
		for ci, conf := range propertyConfs {
			for seed := uint64(1); seed <= seeds; seed++ {
				t.Run(fmt.Sprintf("%s/conf%d/seed%d", policy, ci, seed), func(t *testing.T) {
					run(t, policy, conf, ci, seed, steps)
				})
			}
		}
	}
}

func propertyRun(t *testing.T, policy, conf string, ci int, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, uint64(ci)))
	// 600 MiB makes OOMs and the retry path common.
	d := newDriver(t, conf, policy, 600<<20)
	for i := 0; i < steps; i++ {
		d.step(op{kind: uint8(r.IntN(16)), size: randomSize(r), pick: r.Uint32(), stream: uint8(r.IntN(8))})
	}
	for len(d.live) > 0 {
		d.free(0)
	}
	d.proc.CompleteAllEvents()
	if err := d.a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	st := d.a.Stats()
	if st.AllocatedBytes[allocator.StatAll].Current != 0 || st.ActiveBytes[allocator.StatAll].Current != 0 {
		t.Fatalf("memory still in use after freeing everything: %+v", st.AllocatedBytes)
	}
	if !d.cfg.ExpandableSegments && st.ReservedBytes[allocator.StatAll].Current != 0 {
		t.Fatalf("empty_cache left %d bytes reserved with nothing live", st.ReservedBytes[allocator.StatAll].Current)
	}
	if st.StitchedBytes.Current != 0 || st.NumStitches != st.NumUnstitches {
		t.Fatalf("stitched ranges left with nothing live: %d bytes, %d stitches, %d unstitches",
			st.StitchedBytes.Current, st.NumStitches, st.NumUnstitches)
	}
}

// FuzzAllocator decodes the input as a sequence of operations, 6 bytes each:
// kind, size (3 bytes, scaled by a size class in the kind), pick, stream.
// The first byte picks the settings.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 7, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0x10, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 0, 0xff, 0xff, 0x0f, 1, 1, 0, 0xff, 0xff, 0x0f, 2, 1, 12, 0, 0, 0, 1, 3, 7, 0, 0, 0, 0, 0, 13, 0, 0, 0, 1, 3})
	// The other policies: stitch (7..13), lifetime (14..20), plan (21..27).
	f.Add([]byte{7, 0x20, 0, 0x10, 0, 0, 0, 0x20, 0, 0x10, 0, 1, 0, 0x20, 0, 0x10, 0, 2, 0, 7, 0, 0, 0, 1, 0, 0x20, 0, 0x30, 0, 0, 0})
	f.Add([]byte{14, 0, 0x10, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 0})
	// plan (21..27): 20 MiB kept, then seven steps of 4, 6 and 2 MiB freed
	// together; the plan is made and serves the last steps from its arena.
	planSeed := []byte{21, 0x20, 0x00, 0xa0, 0x00, 0, 0}
	for i := 0; i < 7; i++ {
		planSeed = append(planSeed, 0x20, 0x00, 0x20, 0x00, 0, 0, 0x20, 0x00, 0x30, 0x00, 0, 0, 0x20, 0x00, 0x10, 0x00, 0, 0,
			7, 0, 0, 0, 1, 0, 7, 0, 0, 0, 1, 0, 7, 0, 0, 0, 1, 0)
	}
	f.Add(planSeed)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		n := int(data[0])
		d := newDriver(t, propertyConfs[n%len(propertyConfs)], propertyPolicies[n/len(propertyConfs)%len(propertyPolicies)], 400<<20)
		data = data[1:]
		for len(data) >= 6 && d.steps < 2000 {
			raw := uint64(data[1]) | uint64(data[2])<<8 | uint64(data[3])<<16
			var size uint64
			switch data[0] >> 4 & 3 {
			case 0:
				size = raw%(1<<20) + 1
			case 1:
				size = raw*16 + 1
			case 2:
				size = raw * 512
			default:
				size = raw*64 + 1<<20
			}
			d.step(op{kind: data[0], size: max(size, 1), pick: uint32(data[4]), stream: data[5]})
			data = data[6:]
		}
	})
}

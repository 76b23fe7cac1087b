package cuda

// A differential property test: random sequences of malloc, free,
// record_stream, event completion, empty_cache and settings changes are
// run at once on an allocator over sim and on one over the cuda Device on
// the fake driver, both with the allocator's invariant checks after every
// operation (the same operations as allocator/property_test.go). After
// every step the two must agree exactly: the same block (address rebased,
// size) or the same out-of-memory, the same device memory in use. And
// because the fake's memory is real, every live block carries a tag
// written at its first and last bytes through its device pointer, checked
// when it is freed: a block whose memory was unmapped or handed out twice
// would crash or fail the check.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

var propertyConfs = []string{
	"",
	"expandable_segments:True",
	"max_split_size_mb:40,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
	"roundup_power2_divisions:[1:4,64:8,>:2]",
	"expandable_segments:True,max_split_size_mb:40",
}

type twin struct {
	t      *testing.T
	fake   *fake
	dev    *Device
	gpu    *gpu.GPU
	proc   *gpu.Process
	onSim  *allocator.Allocator
	onCuda *allocator.Allocator
	cfg    config.Config
	live   []pair
	tag    uint64
	steps  int
}

type pair struct {
	s, c *allocator.Block
	tag  uint64
}

func newTwin(t *testing.T, conf string, capacity uint64) *twin {
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	card, err := gpu.New(gpu.Options{Capacity: capacity, NoContextOverhead: true})
	require.NoError(t, err)
	proc, err := card.NewProcess()
	require.NoError(t, err)
	onSim, err := allocator.New(proc, cfg, allocator.WithInvariantChecks())
	require.NoError(t, err)
	f := needFake(t, capacity, 0, 0)
	dev := f.device()
	onCuda, err := allocator.New(dev, cfg, allocator.WithInvariantChecks())
	require.NoError(t, err)
	return &twin{t: t, fake: f, dev: dev, gpu: card, proc: proc, onSim: onSim, onCuda: onCuda, cfg: cfg}
}

func (w *twin) rebase(addr uint64) uint64 {
	return addr - w.fake.stat("arena") + gpu.DefaultAddressBase
}

func (w *twin) step(kind uint8, size uint64, pick uint32, stream uint8) {
	w.steps++
	switch kind % 16 {
	case 0, 1, 2, 3, 4, 5, 6:
		w.malloc(size, allocator.Stream(stream%3))
	case 7, 8, 9, 10, 11:
		w.free(pick)
	case 12:
		if len(w.live) > 0 {
			p := w.live[int(pick)%len(w.live)]
			s := allocator.Stream(stream % 4)
			w.same("record_stream", w.onSim.RecordStream(p.s, s), w.onCuda.RecordStream(p.c, s))
		}
	case 13:
		if pick%2 == 0 {
			w.proc.CompleteAllEvents()
			w.fake.completeAll()
		} else {
			w.proc.CompleteEvents(allocator.Stream(stream % 4))
			w.fake.completeStream(uint64(stream % 4))
		}
		w.same("process_events", w.onSim.ProcessEvents(), w.onCuda.ProcessEvents())
	case 14:
		if pick%4 == 0 {
			w.same("empty_cache", w.onSim.EmptyCache(), w.onCuda.EmptyCache())
		} else {
			w.malloc(size%(2<<20)+1, allocator.Stream(stream%3))
		}
	case 15:
		if pick%8 == 0 {
			c := w.cfg
			c.ExpandableSegments = !c.ExpandableSegments
			es, ec := w.onSim.SetConfig(c), w.onCuda.SetConfig(c)
			w.same("set_config", es, ec)
			if es == nil {
				w.cfg = c
			}
		} else {
			w.free(pick)
		}
	}
	used := w.fake.stat("used")
	if used != w.gpu.Used() || used > w.fake.stat("capacity") {
		w.t.Fatalf("step %d: the fake holds %d bytes, sim %d (capacity %d)", w.steps, used, w.gpu.Used(), w.gpu.Capacity())
	}
}

// same fails unless both sides succeeded, or both failed alike.
func (w *twin) same(what string, es, ec error) {
	w.t.Helper()
	if (es == nil) != (ec == nil) || (es != nil && errors.Is(es, allocator.ErrOutOfMemory) != errors.Is(ec, allocator.ErrOutOfMemory)) {
		w.t.Fatalf("step %d: %s: sim says %v, cuda %v", w.steps, what, es, ec)
	}
}

func (w *twin) malloc(size uint64, s allocator.Stream) {
	bs, es := w.onSim.Malloc(size, s)
	bc, ec := w.onCuda.Malloc(size, s)
	w.same(fmt.Sprintf("malloc(%d, %d)", size, s), es, ec)
	if es != nil {
		var os, oc *allocator.OutOfMemoryError
		require.ErrorAs(w.t, es, &os)
		require.ErrorAs(w.t, ec, &oc)
		require.Equal(w.t, *os, *oc, "step %d: the out-of-memory reports differ", w.steps)
		return
	}
	if w.rebase(bc.Addr()) != bs.Addr() || bc.Size() != bs.Size() {
		w.t.Fatalf("step %d: malloc(%d): sim gave %#x+%d, cuda %#x+%d (rebased)", w.steps, size, bs.Addr(), bs.Size(), w.rebase(bc.Addr()), bc.Size())
	}
	w.tag++
	writeTag(bc, w.tag)
	w.live = append(w.live, pair{bs, bc, w.tag})
}

func (w *twin) free(pick uint32) {
	if len(w.live) == 0 {
		return
	}
	i := int(pick) % len(w.live)
	p := w.live[i]
	w.live[i] = w.live[len(w.live)-1]
	w.live = w.live[:len(w.live)-1]
	if got := readTag(p.c); got != [2]uint64{p.tag, ^p.tag} {
		w.t.Fatalf("step %d: block %#x+%d holds tags %#x, wrote %#x", w.steps, p.c.Addr(), p.c.Size(), got, p.tag)
	}
	w.same("free", w.onSim.Free(p.s), w.onCuda.Free(p.c))
}

// writeTag writes tag at the block's first bytes and its complement at its
// last: blocks are at least 512 bytes.
func writeTag(b *allocator.Block, tag uint64) {
	binary.LittleEndian.PutUint64(hostBytes(b.Addr(), 8), tag)
	binary.LittleEndian.PutUint64(hostBytes(b.Addr()+b.Size()-8, 8), ^tag)
}

func readTag(b *allocator.Block) [2]uint64 {
	return [2]uint64{binary.LittleEndian.Uint64(hostBytes(b.Addr(), 8)),
		binary.LittleEndian.Uint64(hostBytes(b.Addr()+b.Size()-8, 8))}
}

func randomSize(r *rand.Rand) uint64 {
	switch r.IntN(10) {
	case 0, 1, 2, 3:
		return uint64(r.IntN(1<<20)) + 1
	case 4, 5, 6:
		return uint64(r.IntN(9<<20)) + 1<<20
	case 7, 8:
		return uint64(r.IntN(60<<20)) + 10<<20
	default:
		return []uint64{4096, 1 << 20, 3 << 20, 25 << 20}[r.IntN(4)]
	}
}

func TestDifferentialAgainstSim(t *testing.T) {
	steps := 1500
	if testing.Short() || raceEnabled {
		steps = 300
	}
	for ci, conf := range propertyConfs {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("conf%d/seed%d", ci, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, uint64(ci)))
				w := newTwin(t, conf, 600<<20) // small enough for OOMs and retries
				for i := 0; i < steps; i++ {
					w.step(uint8(r.IntN(16)), randomSize(r), r.Uint32(), uint8(r.IntN(8)))
				}
				for len(w.live) > 0 {
					w.free(0)
				}
				w.proc.CompleteAllEvents()
				w.fake.completeAll()
				w.same("empty_cache", w.onSim.EmptyCache(), w.onCuda.EmptyCache())
				require.Equal(t, w.onSim.Stats(), w.onCuda.Stats())
				t.Logf("ooms=%d retries=%d allocs=%d", w.onSim.Stats().NumOOMs, w.onSim.Stats().NumAllocRetries, w.onSim.Stats().NumDeviceAlloc)
				require.Equal(t, w.gpu.Used(), w.fake.stat("used"))
			})
		}
	}
}

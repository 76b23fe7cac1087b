//go:build cgo

package main

// Deferred frees through the C ABI (freequeue.go): memreplay_free queues
// the pointer without entering Go, and every call that enters Go applies
// the queue first. The harness reads the queue's length from C
// (mr_pending_frees), which applies nothing.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A free is queued, and applied before whatever call comes next: the
// malloc of the same size gets the same pointer back, the statistics show
// it freed, empty_cache returns its segment, record_stream and a second
// free of it are errors, and every entry point leaves the queue empty.
func TestDeferredFreeAppliedByTheNextCall(t *testing.T) {
	dir := t.TempDir()
	// Each "free x / pending / CALL / pending" checks that CALL applies
	// the queue: 1 pending before, 0 after.
	calls := []string{
		"malloc y 0 0 0", // a size of 0 returns NULL, and still applies the queue
		"init 1",
		"empty",
		"fraction 1 0",
		"stats 0",
		"record x 7",
		"trace " + filepath.Join(dir, "t.mrt"), // fails: not recording
		"snapshot " + filepath.Join(dir, "s.pickle"),
		"lasterr",
	}
	var script strings.Builder
	script.WriteString("malloc a 1000 0 0\nfree a\npending\nmalloc b 1000 0 0\npending\nstats 0\n")
	for _, c := range calls {
		fmt.Fprintf(&script, "malloc x 1000 0 0\nfree x\npending\n%s\npending\n", c)
	}
	script.WriteString("malloc c 3145728 0 0\nfree c\nempty\nstats 0\nfree c\nlasterr\n")
	r := runHarness(t, harnessEnv(t, 1<<30), script.String())

	require.Equal(t, r.ptr("a"), r.ptr("b"), "the free of a was applied before the malloc of b")
	s := r.stats(0)
	require.Equal(t, int64(1), s["allocation.all.current"])
	require.Equal(t, int64(1), s["allocation.all.freed"])
	for i, c := range calls {
		require.Equal(t, "1", r.nth("pending", 2+2*i), "queued before %q", c)
		require.Equal(t, "0", r.nth("pending", 3+2*i), "%q applies the queue", c)
	}
	require.Equal(t, "1", r.nth("pending", 0))
	require.Equal(t, "0", r.nth("pending", 1))
	require.Regexp(t, `memreplay: record_stream of 0x[0-9a-f]+: not a live pointer`, r.stderr, "record_stream of x after its free")

	s = r.stats(2) // c freed, then empty_cache: its 20 MiB segment is gone, b's 2 MiB stays
	require.Equal(t, int64(1), s["allocation.all.current"])
	require.Equal(t, int64(2*mib), s["reserved_bytes.all.current"])
	c := r.ptr("c")
	require.Equal(t, fmt.Sprintf("free of %#x: not a pointer memreplay_malloc returned, or already freed", c), r.nth("lasterr", 1),
		"a double free, queued, is in last_error by the time the caller asks")
	require.Contains(t, r.stderr, fmt.Sprintf("memreplay: free of %#x: not a pointer", c))
}

// A full queue: the free that finds it full enters Go, applies the queue
// and then its own free; no more than the ring's size ever waits.
func TestDeferredFreeQueueIsBounded(t *testing.T) {
	const n = 3000
	r := runHarness(t, harnessEnv(t, 1<<30), fmt.Sprintf("churn %d 1000\nstats 0\npending\nlasterr", n))
	var got, most, left int
	_, err := fmt.Sscanf(r.get("churn"), "%d %d %d", &got, &most, &left)
	require.NoError(t, err, r.get("churn"))
	require.Equal(t, fqLen, most, "the queue fills up to its size, no further")
	require.Equal(t, n%(fqLen+1), left, "each free that found the queue full applied it")
	s := r.stats(0)
	require.Zero(t, s["allocation.all.current"])
	require.Equal(t, int64(n), s["allocation.all.freed"])
	require.Equal(t, "0", r.get("pending"))
	require.Equal(t, "", r.get("lasterr"))
}

// Several threads: one has device 1 to itself and checks at every
// iteration that its free is applied before its own next malloc (the
// same pointer comes back), while the queue is also drained by the
// mallocs of a thread on device 0 and fed by a thread that only frees.
// free's device argument is not trusted: a block of device 1 freed with
// device 0 is still device 1's.
func TestDeferredFreeThreads(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30, "FAKECUDA_DEVICES=2"), `
ordercheck 20000
stats 0
stats 1
malloc a 1000 1 0
freeas a 0
stats 1
lasterr
`)
	require.Equal(t, "ok", r.get("ordercheck"))
	for i := range 2 {
		s := r.stats(i)
		require.Zero(t, s["allocation.all.current"], "device %d", i)
	}
	require.Equal(t, int64(20000*2), r.stats(1)["allocation.all.freed"])
	s := r.stats(2)
	require.Zero(t, s["allocation.all.current"])
	require.Equal(t, int64(20000*2+1), s["allocation.all.freed"])
	require.Equal(t, "", r.get("lasterr"))
}

// A free of a block used on another stream records its events when it is
// called, as PyTorch's does (not later, when more work has been queued on
// that stream): while such a block is live, every free is applied at its
// call; after, frees are queued again.
func TestDeferredFreeStreamUse(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30), `
malloc a 1048576 0 0
record a 7
malloc b 1000 0 0
free b
pending
free a
pending
malloc c 1048576 0 0
stats 0
malloc d 1000 0 0
record d 0
free d
pending
`)
	require.Equal(t, "0", r.nth("pending", 0), "a is live with a use on stream 7: b's free is applied at its call")
	require.Equal(t, "0", r.nth("pending", 1), "a's own free, applied at its call")
	require.NotEqual(t, r.ptr("a"), r.ptr("c"), "a waits for stream 7's event")
	require.Equal(t, int64(2), r.stats(0)["active.all.current"], "c, and a pending its event")
	require.Equal(t, "1", r.nth("pending", 2), "no block with another stream's use is live: queued again (record_stream on the block's own stream is none)")
}

// While recording, frees are applied at their call (each recorded event
// keeps the time of its call): nothing is ever queued.
func TestDeferredFreeOffWhileRecording(t *testing.T) {
	r := runHarness(t, harnessEnv(t, 1<<30, "MEMREPLAY_RECORD=1"), "malloc a 1000 0 0\nfree a\npending")
	require.Equal(t, "0", r.get("pending"))
	r = runHarness(t, harnessEnv(t, 1<<30), "malloc a 1000 0 0\nfree a\npending")
	require.Equal(t, "1", r.get("pending"), "queued when not recording")
}

// deferFree is what memreplay_free does (shim.c): queue p, or enter Go
// when the queue is full or a live block has a use on another stream. dev
// is free's device argument.
func deferFree(l *library, p uintptr, dev int) {
	if !l.q.queue(p, dev) {
		l.freeOn(p, dev)
	}
}

func newDeferringLib(t testing.TB) (*library, *bytes.Buffer) {
	t.Helper()
	l, stderr := newTestLib(t, "", func(o *options) { o.deferFrees = true })
	require.NotNil(t, l.q)
	return l, stderr
}

// Thread A takes thread B's queued free out of the queue to apply it;
// B's next malloc must not run until A has applied it (else B would get
// another block, and the allocator would have served B's malloc before
// B's own free). Here A stops inside the drain, just before applying, and
// B's malloc waits for it.
func TestDeferredFreeWaitsForTheDrainer(t *testing.T) {
	l, stderr := newDeferringLib(t)
	p, err := l.malloc(1000, 0, 0)
	require.NoError(t, err)
	deferFree(l, p, 0) // B's free
	applying, resume := make(chan uintptr, 1), make(chan struct{})
	var resumed sync.Once
	release := func() { resumed.Do(func() { close(resume) }) }
	t.Cleanup(release) // before l.close, which drains: A must not hold the queue then
	l.applyHook = func(p uintptr) {
		applying <- p
		<-resume
	}
	go l.statsJSON(0) // A: any call drains
	require.Equal(t, p, <-applying, "A is applying B's free")
	got := mallocWaits(t, l, 1000, "B's malloc, before its own free of %#x was applied", p)
	release()
	require.Equal(t, p, <-got, "B's malloc came after its free")
	require.Zero(t, l.q.pending())
	require.Empty(t, stderr.String())
}

// mallocWaits starts a malloc of size on device 0 and checks that it has
// not returned 50 ms later (what says what it waits for, with p); the
// pointer comes on the channel once it does.
func mallocWaits(t *testing.T, l *library, size uint64, what string, p uintptr) <-chan uintptr {
	t.Helper()
	got := make(chan uintptr, 1)
	go func() {
		q, _ := l.malloc(size, 0, 0) // 0 on an error
		got <- q
	}()
	select {
	case q := <-got:
		t.Fatalf("returned %#x: "+what, q, p)
	case <-time.After(50 * time.Millisecond):
	}
	return got
}

// Without C in between (the in-process tests run under -race): threads
// that free through the queue, one that only frees, one with device 1 to
// itself that must get its freed block back at its next malloc, and
// record_stream, stats and empty_cache at once; all is freed at the end
// and nothing was reported.
func TestDeferredFreeConcurrent(t *testing.T) {
	l, stderr := newDeferringLib(t)
	iters := 4000
	if testing.Short() || raceEnabled {
		iters = 1000
	}
	orphans := make([]uintptr, 2*fqLen+10) // freed by a thread that never mallocs
	for i := range orphans {
		p, err := l.malloc(4096, 0, 0)
		require.NoError(t, err)
		orphans[i] = p
	}
	// Live throughout, so that empty_cache (from the threads on device 0)
	// never returns device 1's segment: a freed block then stays where a
	// malloc of its size finds it.
	anchor, err := l.malloc(1000, 1, 0)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() { // device 1's own thread
		for i := range iters {
			p, err := l.malloc(1000, 1, 0)
			if err != nil {
				errs <- err
				return
			}
			deferFree(l, p, 1)
			q, err := l.malloc(1000, 1, 0)
			if err != nil {
				errs <- err
				return
			}
			if q != p {
				errs <- fmt.Errorf("iteration %d: freed %#x, then malloc gave %#x", i, p, q)
				return
			}
			deferFree(l, q, 1)
		}
	})
	wg.Go(func() {
		// Device 0's blocks freed as device 1's: the drains of both
		// devices' threads look in the other's table while holding their
		// own device's lock.
		for _, p := range orphans {
			deferFree(l, p, 1)
		}
	})
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var live []uintptr
			for i := range iters {
				if len(live) == 0 || (rng.IntN(2) == 0 && len(live) < 20) {
					p, err := l.malloc(uint64(1+rng.IntN(3<<20)), 0, uintptr(w))
					if err != nil {
						errs <- err
						return
					}
					live = append(live, p)
				} else {
					k := rng.IntN(len(live))
					p := live[k]
					live = append(live[:k], live[k+1:]...)
					if rng.IntN(5) == 0 {
						if err := l.recordStream(p, 11); err != nil {
							errs <- err
							return
						}
					}
					switch rng.IntN(8) {
					case 0, 1:
						l.freeOn(p, 0)
					case 2:
						deferFree(l, p, 1) // the wrong device
					default:
						deferFree(l, p, 0)
					}
				}
				switch i % 200 {
				case 50 + w:
					if _, err := l.statsJSON(0); err != nil {
						errs <- err
						return
					}
				case 150 + w:
					if err := l.emptyCache(); err != nil {
						errs <- err
						return
					}
				}
			}
			for _, p := range live {
				deferFree(l, p, 0)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	deferFree(l, anchor, 1)
	require.Equal(t, "", l.lastError())
	require.Zero(t, l.q.pending())
	require.Zero(t, l.livePointers())
	for dev := range 2 {
		require.Zero(t, libStats(t, l, dev)["allocation.all.current"], "device %d", dev)
	}
	require.Equal(t, uint64(2*iters+1), deviceStat(t, l, 1, "allocation.all.freed"))
	require.Empty(t, stderr.String())
}

// deviceStat reads a statistic from the allocator itself, bypassing the
// library (and so its queue).
func deviceStat(t *testing.T, l *library, dev int, key string) uint64 {
	t.Helper()
	d := l.devs[dev].Load()
	require.NotNil(t, d)
	st := d.stats()
	return uint64(st.Map()[key])
}

// Frees queued, then a call: the call applied them (the allocator says
// so, asked directly), whichever entry point it was; a double free and an
// unknown pointer are in last_error. Recording keeps no queue.
func TestDeferredFreeEveryEntryPoint(t *testing.T) {
	l, stderr := newDeferringLib(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		call func()
	}{
		{"malloc", func() { l.malloc(0, 0, 0) }},
		{"free", func() { l.free(0) }},
		{"record_stream", func() { l.recordStream(1, 1) }},
		{"empty_cache", func() { l.emptyCache() }},
		{"set_memory_fraction", func() { l.setMemoryFraction(1, 0) }},
		{"init", func() { l.init(1) }},
		{"stats", func() { l.statsJSON(0) }},
		{"write_trace", func() { l.writeTrace(filepath.Join(dir, "t.mrt")) }},
		{"write_snapshot", func() { l.writeSnapshot(filepath.Join(dir, "s.pickle")) }},
		{"last_error", func() { l.lastError() }},
	} {
		p, err := l.malloc(1000, 0, 0)
		require.NoError(t, err)
		freed := deviceStat(t, l, 0, "allocation.all.freed")
		deferFree(l, p, 0)
		require.Equal(t, uint64(1), l.q.pending())
		c.call()
		require.Zero(t, l.q.pending(), c.name)
		require.Equal(t, freed+1, deviceStat(t, l, 0, "allocation.all.freed"), "%s applied the queued free", c.name)
	}
	p, err := l.malloc(1000, 0, 0)
	require.NoError(t, err)
	deferFree(l, p, 0)
	deferFree(l, p, 0)
	deferFree(l, 0x1234, 0)
	require.Equal(t, "free of 0x1234: not a pointer memreplay_malloc returned, or already freed", l.lastError())
	require.Contains(t, stderr.String(), fmt.Sprintf("memreplay: free of %#x: not a pointer", p))

	// free's device argument only says where to look first: a device
	// not opened, or out of range, still frees the block.
	for _, dev := range []int{1, -1, 1 << 20} {
		p, err := l.malloc(1000, 0, 0)
		require.NoError(t, err)
		freed := deviceStat(t, l, 0, "allocation.all.freed")
		deferFree(l, p, dev)
		l.init(1)
		require.Equal(t, freed+1, deviceStat(t, l, 0, "allocation.all.freed"), "freed as device %d's", dev)
	}
	require.Equal(t, "free of 0x1234: not a pointer memreplay_malloc returned, or already freed", l.lastError(), "nothing reported since")

	// A block used on another stream: frees are applied at their call
	// while it lives.
	a, err := l.malloc(4096, 0, 0)
	require.NoError(t, err)
	require.NoError(t, l.recordStream(a, 7))
	b, err := l.malloc(1000, 0, 0)
	require.NoError(t, err)
	freed := deviceStat(t, l, 0, "allocation.all.freed")
	deferFree(l, b, 0)
	require.Zero(t, l.q.pending())
	require.Equal(t, freed+1, deviceStat(t, l, 0, "allocation.all.freed"))
	deferFree(l, a, 0)
	require.Equal(t, freed+2, deviceStat(t, l, 0, "allocation.all.freed"))
	b, err = l.malloc(1000, 0, 0)
	require.NoError(t, err)
	deferFree(l, b, 0)
	require.Equal(t, uint64(1), l.q.pending(), "queued again once a is freed")

	rec, _ := newTestLib(t, "", func(o *options) { o.deferFrees, o.record = true, true })
	require.Nil(t, rec.q, "recording applies each free at its call")
	require.True(t, optionsFromEnv(func(string) (string, bool) { return "", false }).deferFrees, "frees are deferred by default")
}

// A push stopped between taking its ticket and writing its slot (its
// thread preempted there) holds back the entries behind it: a malloc whose
// own free is behind it waits until the slot is written and both frees
// are applied, in ticket order.
func TestDeferredFreeWaitsForAPush(t *testing.T) {
	l, stderr := newDeferringLib(t)
	p, err := l.malloc(1000, 0, 0)
	require.NoError(t, err)
	r, err := l.malloc(5000, 0, 0)
	require.NoError(t, err)
	ticket := l.q.claim() // another thread's push, not yet written
	require.GreaterOrEqual(t, ticket, int64(0))
	var filled sync.Once
	fill := func() { filled.Do(func() { l.q.fill(ticket, r, 0) }) }
	t.Cleanup(fill)    // before l.close, which drains
	deferFree(l, p, 0) // this thread's free, behind it
	got := mallocWaits(t, l, 1000, "a malloc, while the free of %#x waited behind an unwritten slot", p)
	fill()
	require.Equal(t, p, <-got)
	require.Zero(t, l.q.pending())
	require.Equal(t, uint64(2), deviceStat(t, l, 0, "allocation.all.freed"))
	require.Empty(t, stderr.String())
}

// BenchmarkLibraryPairDeferred is LibraryPair with the free queued as
// memreplay_free queues it (the push is a Go -> C call here, which the C
// caller does not pay) and applied by the next malloc: the Go side of the
// exported pair, less the crossing. It is also the workload of the
// profile PGO was measured with (docs/performance.md, "The C ABI pair,
// next round").
func BenchmarkLibraryPairDeferred(b *testing.B) {
	l, _ := newDeferringLib(b)
	for b.Loop() {
		p, err := l.malloc(benchSize, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		deferFree(l, p, 0)
	}
}

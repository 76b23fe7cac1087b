package main

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
)

// TestPtrTableMatchesAMap drives the table with random puts, takes and
// gets of addresses shaped like the allocator's (512-byte blocks packed in
// a segment, 2 MiB-aligned large blocks, which collide in the low bits)
// and compares every answer with a Go map's. The table grows well past its
// first size, and removals in the middle of long probe runs exercise the
// backward shift.
func TestPtrTableMatchesAMap(t *testing.T) {
	var tab ptrTable
	tab.init()
	model := map[uintptr]ptrEntry{}
	rng := rand.New(rand.NewPCG(3, 4))
	blocks := make([]allocator.Block, 64)
	addr := func() uintptr {
		if rng.IntN(2) == 0 {
			return 0x7f00_0000_0000 + uintptr(rng.IntN(1<<14))<<9
		}
		return 0x7e00_0000_0000 + uintptr(rng.IntN(1<<12))<<21
	}
	var live []uintptr // model's keys, in any order
	pos := map[uintptr]int{}
	drop := func(p uintptr) {
		k := pos[p]
		last := live[len(live)-1]
		live[k], pos[last] = last, k
		live = live[:len(live)-1]
		delete(pos, p)
	}
	for step := range 400_000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(live) == 0:
			p := addr()
			e := ptrEntry{b: &blocks[rng.IntN(len(blocks))], streamed: rng.IntN(2) == 0}
			_, had := model[p]
			require.Equal(t, !had, tab.put(p, e), "step %d: put %#x", step, p)
			if !had {
				pos[p] = len(live)
				live = append(live, p)
			}
			model[p] = e
		case op < 9:
			var p uintptr
			if rng.IntN(8) == 0 {
				p = addr() // maybe absent
			} else {
				p = live[rng.IntN(len(live))]
			}
			want, had := model[p]
			got, ok := tab.take(p)
			require.Equal(t, had, ok, "step %d: take %#x", step, p)
			sameEntry(t, want, got, "step %d: take %#x", step, p)
			if had {
				delete(model, p)
				drop(p)
			}
		default:
			p := addr()
			want, had := model[p]
			got := tab.get(p)
			require.Equal(t, had, got != nil, "step %d: get %#x", step, p)
			if had {
				sameEntry(t, want, *got, "step %d: get %#x", step, p)
			}
		}
		if step%50_000 == 0 {
			require.Equal(t, len(model), tab.len())
		}
	}
	require.Equal(t, len(model), tab.len())
	for p, want := range model {
		got, ok := tab.take(p)
		require.True(t, ok, "%#x", p)
		sameEntry(t, want, got, "%#x", p)
	}
	require.Zero(t, tab.len())
	require.Nil(t, tab.get(^uintptr(0)), "the address whose key would be the empty slot's")
	_, ok := tab.take(^uintptr(0))
	require.False(t, ok)
	require.Zero(t, tab.len())
}

// sameEntry compares entries by the block's identity: the blocks are all
// zero, so require.Equal, which compares what pointers point to, would
// take any block for any other.
func sameEntry(t *testing.T, want, got ptrEntry, msg string, args ...any) {
	t.Helper()
	require.Same(t, want.b, got.b, append([]any{msg}, args...)...)
	require.Equal(t, want.streamed, got.streamed, append([]any{msg}, args...)...)
}

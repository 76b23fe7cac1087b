//go:build cgo

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
)

// A panic inside an exported function never reaches the C caller: it
// becomes last_error, and the device's lock it held is released, so the
// next call on that device does not wait forever. (Here the panic is a
// device with no allocator behind a live pointer, which only a bug could
// make.)
func TestPanicBecomesLastError(t *testing.T) {
	l, stderr := newTestLib(t, "", nil)
	old := global.Load()
	global.Store(l)
	defer global.Store(old)
	broken := addBrokenDevice(l)
	const p = 0x7000_0000_0000
	put := func() {
		require.True(t, broken.mu.TryLock(), "the device's lock is free")
		broken.ptrs.put(p, ptrEntry{b: &allocator.Block{}})
		broken.mu.Unlock()
	}
	put()
	require.NotPanics(t, func() { mrgo_free(p, brokenOrdinal) })
	require.Contains(t, l.lastError(), "internal error in memreplay_free: runtime error: invalid memory address or nil pointer dereference")
	require.Contains(t, stderr.String(), "memreplay: internal error in memreplay_free")

	put() // the panicking free released the device's lock
	require.NotPanics(t, func() { mrgo_record_stream(p, 1) })
	require.Contains(t, l.lastError(), "internal error in memreplay_record_stream")
	require.True(t, broken.mu.TryLock(), "the panicking record_stream released the device's lock")
	broken.mu.Unlock()
}

// brokenOrdinal is the device addBrokenDevice adds.
const brokenOrdinal = 5

// addBrokenDevice gives l a device with no allocator behind it: any free
// or record_stream of a pointer put in its table panics.
func addBrokenDevice(l *library) *device {
	broken := &device{ordinal: brokenOrdinal}
	broken.ptrs.init()
	l.devs[brokenOrdinal].Store(broken)
	l.top.Store(brokenOrdinal + 1)
	return broken
}

// A queued free that panics, applied by a malloc: the panic is reported as
// memreplay_free's, the entry counts as applied, no lock stays held (the
// queue's, the malloc's device's, the broken device's), and the malloc
// still returns its block. Through mrgo_malloc and through the in-process
// malloc, each holding its device's lock while it applies the free.
func TestPanicInAQueuedFree(t *testing.T) {
	l, stderr := newDeferringLib(t)
	old := global.Load()
	global.Store(l)
	defer global.Store(old)
	broken := addBrokenDevice(l)
	warm, err := l.malloc(1000, 0, 0) // device 0 open: the mallocs below take the hot path
	require.NoError(t, err)
	require.NoError(t, l.free(warm))
	const p = 0x7000_0000_0000
	for _, via := range []string{"mrgo_malloc", "malloc"} {
		broken.ptrs.put(p, ptrEntry{b: &allocator.Block{}})
		require.True(t, l.q.queue(p, brokenOrdinal))
		var got uintptr
		require.NotPanics(t, func() {
			if via == "malloc" {
				var err error
				got, err = l.malloc(1000, 0, 0)
				require.NoError(t, err)
			} else {
				mrgo_malloc(1000, 0, 0, &got, nil)
			}
		}, via)
		require.NotZero(t, got, "%s returned a block after the queued free's panic", via)
		require.Zero(t, l.q.pending(), via)
		require.Contains(t, l.lastError(), "internal error in memreplay_free: runtime error: invalid memory address or nil pointer dereference", via)
		require.True(t, broken.mu.TryLock(), via)
		broken.mu.Unlock()
		d := l.devs[0].Load()
		require.True(t, d.mu.TryLock(), "%s left device 0's lock held", via)
		d.mu.Unlock()
		require.True(t, l.qmu.TryLock(), "%s left the queue's lock held", via)
		l.qmu.Unlock()
		require.NoError(t, l.free(got))
	}
	require.Equal(t, 2, strings.Count(stderr.String(), "internal error in memreplay_free"))
}

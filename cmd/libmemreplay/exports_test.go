//go:build cgo

package main

import (
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
	const ord = 5
	broken := &device{ordinal: ord}
	broken.ptrs.init()
	l.devs[ord].Store(broken)
	l.top.Store(ord + 1)
	const p = 0x7000_0000_0000
	put := func() {
		require.True(t, broken.mu.TryLock(), "the device's lock is free")
		broken.ptrs.put(p, ptrEntry{b: &allocator.Block{}})
		broken.mu.Unlock()
	}
	put()
	require.NotPanics(t, func() { mrgo_free(p, ord) })
	require.Contains(t, l.lastError(), "internal error in memreplay_free: runtime error: invalid memory address or nil pointer dereference")
	require.Contains(t, stderr.String(), "memreplay: internal error in memreplay_free")

	put() // the panicking free released the device's lock
	require.NotPanics(t, func() { mrgo_record_stream(p, 1) })
	require.Contains(t, l.lastError(), "internal error in memreplay_record_stream")
	require.True(t, broken.mu.TryLock(), "the panicking record_stream released the device's lock")
	broken.mu.Unlock()
}

//go:build cgo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A panic inside an exported function never reaches the C caller: it
// becomes last_error. (Here the panic is a table entry with no device,
// which only a bug could make.)
func TestPanicBecomesLastError(t *testing.T) {
	l, stderr := newTestLib(t, "", nil)
	old := global.Load()
	global.Store(l)
	defer global.Store(old)
	const p = 0x7000_0000_0000
	l.ptrs.put(p, ptrEntry{})
	require.NotPanics(t, func() { mrgo_free(p) })
	require.Contains(t, l.lastError(), "internal error in memreplay_free: runtime error: invalid memory address or nil pointer dereference")
	require.Contains(t, stderr.String(), "memreplay: internal error in memreplay_free")

	l.ptrs.put(p, ptrEntry{})
	require.NotPanics(t, func() { mrgo_record_stream(p, 1) })
	require.Contains(t, l.lastError(), "internal error in memreplay_record_stream")
}

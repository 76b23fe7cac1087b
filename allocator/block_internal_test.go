package allocator

import (
	"testing"
	"unsafe"
)

// TestBlockIsTwoCacheLines holds Block's layout (block.go): 128 bytes, with
// the fields best fit, splitting and merging read in the first 64. A field
// added to Block, or one of those moved past the first line, fails it.
func TestBlockIsTwoCacheLines(t *testing.T) {
	var b Block
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is a 64-bit platform's")
	}
	if n := unsafe.Sizeof(b); n != 128 {
		t.Errorf("a Block is %d bytes, not 128: the slabs' blocks straddle cache lines", n)
	}
	for name, end := range map[string]uintptr{
		"addr":       unsafe.Offsetof(b.addr) + unsafe.Sizeof(b.addr),
		"size":       unsafe.Offsetof(b.size) + unsafe.Sizeof(b.size),
		"stream":     unsafe.Offsetof(b.stream) + unsafe.Sizeof(b.stream),
		"pool":       unsafe.Offsetof(b.pool) + unsafe.Sizeof(b.pool),
		"seg":        unsafe.Offsetof(b.seg) + unsafe.Sizeof(b.seg),
		"prev":       unsafe.Offsetof(b.prev) + unsafe.Sizeof(b.prev),
		"next":       unsafe.Offsetof(b.next) + unsafe.Sizeof(b.next),
		"allocated":  unsafe.Offsetof(b.allocated) + unsafe.Sizeof(b.allocated),
		"older":      unsafe.Offsetof(b.older) + unsafe.Sizeof(b.older),
		"eventCount": unsafe.Offsetof(b.eventCount) + unsafe.Sizeof(b.eventCount),
	} {
		if end > 64 {
			t.Errorf("Block.%s ends at byte %d, past the first cache line", name, end)
		}
	}
}

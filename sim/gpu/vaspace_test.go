package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVASpaceFirstFitAndCoalescing(t *testing.T) {
	v := newVASpace(0x1000000, 64*miB)
	alloc := func(size, align uint64) uint64 {
		t.Helper()
		a, ok := v.alloc(size, align)
		require.True(t, ok)
		return a
	}
	a := alloc(4*miB, largeAlign)
	b := alloc(512, smallAlign)
	c := alloc(4*miB, largeAlign)
	assert.Equal(t, uint64(0x1000000), a)
	assert.Equal(t, a+4*miB, b)
	assert.Equal(t, b+2*miB, c, "aligned up past the small block")
	assert.Equal(t, []span{{b + 512, c}, {c + 4*miB, 0x1000000 + 64*miB}}, v.free)

	// Freeing in any order coalesces back to one range.
	v.release(a, 4*miB)
	assert.Equal(t, []span{{a, b}, {b + 512, c}, {c + 4*miB, 0x1000000 + 64*miB}}, v.free)
	v.release(c, 4*miB)
	assert.Equal(t, []span{{a, b}, {b + 512, 0x1000000 + 64*miB}}, v.free)
	v.release(b, 512)
	assert.Equal(t, []span{{0x1000000, 0x1000000 + 64*miB}}, v.free)

	// Too big, or no aligned room, fails without changing anything.
	_, ok := v.alloc(64*miB+2*miB, largeAlign)
	assert.False(t, ok)
	assert.Equal(t, []span{{0x1000000, 0x1000000 + 64*miB}}, v.free)
	assert.Equal(t, uint64(0x1000000), alloc(64*miB, largeAlign))
	assert.Empty(t, v.free)
	_, ok = v.alloc(512, smallAlign)
	assert.False(t, ok)
}

package trial

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestKindTableAgreesWithAMap drives a kindTable and a Go map keyed by
// (string address, length, layer) with the same random puts and gets:
// strings of equal content at different addresses (distinct keys), prefixes
// of one string (same address, other length), layers from -1 past the
// kept range, and the empty string, over enough distinct keys and wide
// enough rows to make the table empty itself. A hit must carry the map's
// value; a miss is right only where the map has none or the key does not
// pack.
func TestKindTableAgreesWithAMap(t *testing.T) {
	type mkey struct {
		p     *byte
		n     int
		layer int
	}
	rng := rand.New(rand.NewPCG(5, 6))
	base := strings.Repeat("attention.output.LayerNorm.weight", 3)
	var kinds []string
	for i := 1; i < 40; i++ {
		kinds = append(kinds, base[:i])                                   // one address, many lengths
		kinds = append(kinds, strings.Clone(base[:i%7+1]))                // equal content, another address
		kinds = append(kinds, strings.Repeat("x", rng.IntN(3)*70000/2+i)) // long ones too
	}
	kinds = append(kinds, "", strings.Repeat("y", 0xffff), strings.Repeat("y", 0x10000))
	packs := func(k string, layer int) bool {
		return len(k) > 0 && len(k) <= 0xffff && layer >= -1 && layer+1 < maxRowWidth
	}
	var tab kindTable
	want := map[mkey]int32{}
	resets := 0
	for step := 0; step < 200000; step++ {
		kind := kinds[rng.IntN(len(kinds))]
		var layer int
		switch rng.IntN(10) {
		case 0:
			layer = -1
		case 1:
			layer = maxRowWidth - 3 + rng.IntN(4) // at and past the kept range
		case 2:
			layer = -2 - rng.IntN(3)
		default:
			layer = rng.IntN(1 << uint(rng.IntN(12)+1))
		}
		mk := mkey{unsafe.StringData(kind), len(kind), layer}
		k := keyOf(layer, kind)
		v, ok := tab.get(k)
		w, has := want[mk]
		switch {
		case !packs(kind, layer):
			require.False(t, ok, "step %d: an unpacked key (len %d, layer %d) found", step, len(kind), layer)
		case ok:
			require.True(t, has, "step %d: found a key never put (len %d, layer %d)", step, len(kind), layer)
			require.Equal(t, w, v, "step %d", step)
		default:
			require.False(t, has, "step %d: lost a key (len %d, layer %d)", step, len(kind), layer)
		}
		if !ok {
			nv := int32(rng.IntN(1 << 30))
			tab.put(k, nv)
			if packs(kind, layer) {
				if tab.n != len(want)+1 {
					// The table emptied itself (maxFastEntries, or
					// its rows' bound) before it put k.
					require.Equal(t, 1, tab.n, "step %d", step)
					clear(want)
					resets++
				}
				want[mk] = nv
			}
		}
		require.Equal(t, len(want), tab.n, "step %d", step)
		if step%50000 == 49999 {
			tab.reset()
			clear(want)
		}
	}
	require.Positive(t, resets, "the table never emptied itself")
}

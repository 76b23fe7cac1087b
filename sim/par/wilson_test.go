package par

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWilsonUpper(t *testing.T) {
	// Reference values computed by hand from the closed form.
	assert.InDelta(t, 1.6449, zFor(0.95), 1e-4)
	assert.InDelta(t, 1.2816, zFor(0.90), 1e-4)
	// No success in n: z²/(n+z²).
	assert.InDelta(t, 1.6424/(32+1.6424), wilsonUpper(0, 32, 0.9), 1e-4)
	assert.InDelta(t, 2.7055/(60+2.7055), wilsonUpper(0, 60, 0.95), 1e-4)
	// All successes: the bound is 1.
	assert.InDelta(t, 1, wilsonUpper(10, 10, 0.9), 1e-12)
	// 5 of 20 at 95%: (0.25 + 0.06764 + 1.6449*sqrt(0.009375+0.001691)) / 1.13528.
	assert.InDelta(t, 0.4322, wilsonUpper(5, 20, 0.95), 1e-3)
	assert.Equal(t, 1.0, wilsonUpper(0, 0, 0.9))
	// The bound shrinks with more evidence and grows with confidence.
	assert.Less(t, wilsonUpper(1, 100, 0.9), wilsonUpper(1, 50, 0.9))
	assert.Less(t, wilsonUpper(1, 50, 0.8), wilsonUpper(1, 50, 0.9))
}

func TestMixesNeeded(t *testing.T) {
	for _, c := range []float64{0.8, 0.9, 0.95, 0.99} {
		n := mixesNeeded(c)
		assert.Less(t, wilsonUpper(0, n, c), 1-c, "c=%v n=%d", c, n)
		assert.GreaterOrEqual(t, wilsonUpper(0, n-1, c), 1-c, "c=%v n=%d", c, n-1)
	}
	assert.Equal(t, 15, mixesNeeded(0.9))
	assert.Equal(t, 52, mixesNeeded(0.95))
}

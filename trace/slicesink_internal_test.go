package trace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The events a streamed import converts one by one come out of flatten in
// order and complete, across chunk boundaries, also after a reserved run
// that overflowed.
func TestSliceSinkKeepsOrder(t *testing.T) {
	for _, c := range []struct{ reserved, n int }{
		{0, 0}, {0, 1}, {0, sinkFirstChunk}, {0, sinkFirstChunk + 1}, {0, 3*sinkMaxChunk + 17},
		{10, 5}, {10, 10}, {10, 11}, {10, 2000},
	} {
		s := &sliceSink{t: &Trace{}}
		if c.reserved > 0 {
			s.reserve(c.reserved)
		}
		for i := 0; i < c.n; i++ {
			e := s.next()
			require.Zero(t, *e)
			e.Addr = uint64(i)
			s.commit()
		}
		s.flatten()
		require.Len(t, s.t.Events, c.n, "%+v", c)
		for i, e := range s.t.Events {
			require.Equal(t, uint64(i), e.Addr, "%+v", c)
		}
		if c.n > c.reserved {
			require.Equal(t, c.n, cap(s.t.Events), "%+v: no spare capacity kept", c)
		}
		s.flatten() // twice is harmless
		require.Len(t, s.t.Events, c.n)
	}
}

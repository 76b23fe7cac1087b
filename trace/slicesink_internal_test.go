package trace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The events a streamed import converts one by one come out of flatten in
// order and complete, every field as it was given (they are packed in
// between), also after a reserved run that overflowed.
func TestSliceSinkKeepsOrder(t *testing.T) {
	for _, c := range []struct{ reserved, n int }{
		{0, 0}, {0, 1}, {0, 256}, {0, 257}, {0, 3*65536 + 17},
		{10, 5}, {10, 10}, {10, 11}, {10, 2000},
	} {
		s := &sliceSink{t: &Trace{}}
		if c.reserved > 0 {
			s.reserve(c.reserved)
		}
		for i := 0; i < c.n; i++ {
			e := s.next()
			require.Zero(t, *e)
			*e = sinkEvent(i)
			s.commit()
		}
		s.flatten()
		require.Len(t, s.t.Events, c.n, "%+v", c)
		for i, e := range s.t.Events {
			require.Equal(t, sinkEvent(i), e, "%+v", c)
		}
		if c.n > c.reserved {
			require.Equal(t, c.n, cap(s.t.Events), "%+v: no spare capacity kept", c)
		}
		s.flatten() // twice is harmless
		require.Len(t, s.t.Events, c.n)
	}
}

// sinkEvent is a different event for each i: every field set, devices and
// streams changing, addresses and times going down as well as up.
func sinkEvent(i int) Event {
	return Event{Action: Action(1 + i%8), Device: int32(i % 3), Addr: uint64(i) * 0x9E3779B97F4A7C15,
		Size: uint64(i), Stream: uint64(i/5) << 40, TimeUS: int64(i%7)*-1e12 + int64(i),
		DeviceFree: uint64(i%2) << 33, Stack: StackID(i % 5), Label: [...]string{"", "snapshot", "x"}[i%3]}
}

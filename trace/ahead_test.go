package trace

import (
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// aheadPacked is a Packed of n random events over two devices.
func aheadPacked(n int) *Packed {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	p := &Packed{Header: Header{Source: "test"}, Stacks: NewStacks(), Events: &EventLog{},
		Final: []Segment{{Address: 1 << 20, TotalSize: 2 << 20}}, HasFinal: true}
	for i := range n {
		e := Event{Action: Action(1 + rng.IntN(5)), Device: int32(rng.IntN(2)), Addr: rng.Uint64N(1 << 40),
			Size: rng.Uint64N(1 << 30), Stream: rng.Uint64N(3), TimeUS: int64(i)}
		if rng.IntN(50) == 0 {
			e.Label = "marker"
		}
		p.Events.Append(&e)
	}
	return p
}

// The reader that decodes ahead hands out every event of the log, in
// order, whatever the mix of Next and NextBatch and their sizes, across
// its batches; the end state shows only once every event was read, and
// the header and initial state as they are when asked (prepared after
// the reader was made).
func TestAheadReaderSameEvents(t *testing.T) {
	for _, n := range []int{0, 1, aheadBatch - 1, aheadBatch, 3*aheadBatch + 17} {
		p := aheadPacked(n)
		r := newAheadReader(p)
		p.Header.Notes = []string{"prepared"}
		p.Initial, p.InitialReconstructed = []Segment{{Address: 1}}, true
		require.Equal(t, []string{"prepared"}, r.Header().Notes)
		init, rec := r.Initial()
		require.True(t, rec)
		require.Len(t, init, 1)

		want := p.Events.Cursor()
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		buf := make([]Event, 300)
		read := 0
		for {
			if _, ok := r.Final(); ok && read < n {
				t.Fatalf("n=%d: Final before the last event (%d read)", n, read)
			}
			var got []Event
			var err error
			if rng.IntN(2) == 0 {
				var e Event
				if err = r.Next(&e); err == nil {
					got = []Event{e}
				}
			} else {
				k, berr := r.NextBatch(buf[:1+rng.IntN(len(buf))])
				got, err = buf[:k], berr
				if k > 0 {
					require.NoError(t, berr)
				}
			}
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			for i := range got {
				var w Event
				require.NoError(t, want.Next(&w))
				require.Equal(t, w, got[i], "n=%d: event %d", n, read)
				read++
			}
		}
		require.Equal(t, n, read)
		var w Event
		require.Equal(t, io.EOF, want.Next(&w))
		final, ok := r.Final()
		require.True(t, ok)
		require.Equal(t, p.Final, final)
		k, err := r.NextBatch(buf)
		require.Zero(t, k)
		require.Equal(t, io.EOF, err, "again after the end")
		require.NoError(t, r.Close())
	}
}

// Close stops the decoding goroutine wherever the reader stopped (a
// replay that ends at an OOM reads no further), and a reader never read
// starts none.
func TestAheadReaderCloseMidway(t *testing.T) {
	p := aheadPacked(5 * aheadBatch)
	r := newAheadReader(p)
	var e Event
	require.NoError(t, r.Next(&e))
	require.NoError(t, r.Close())
	<-r.done // returns only if the goroutine ended
	require.NoError(t, r.Close(), "twice")

	idle := newAheadReader(p)
	require.NoError(t, idle.Close())
	require.False(t, idle.started)
}

// A snapshot pickle opens with the reader that decodes ahead, which the
// replay reads in batches.
func TestOpenPickleBatchReader(t *testing.T) {
	o, err := Open(testdataSnapshot)
	require.NoError(t, err)
	defer o.Close()
	_, ok := o.Reader.(BatchReader)
	require.True(t, ok)
	evs, err := ReadAll(o.Reader)
	require.NoError(t, err)
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	require.Equal(t, tr.Events, evs.Events)
}

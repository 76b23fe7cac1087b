package gpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

func record(t *testing.T, p *gpu.Process, s allocator.Stream) allocator.Event {
	t.Helper()
	e, err := p.RecordEvent(s)
	require.NoError(t, err)
	return e
}

func query(t *testing.T, p *gpu.Process, e allocator.Event) bool {
	t.Helper()
	done, err := p.QueryEvent(e)
	require.NoError(t, err)
	return done
}

func TestEventsStayIncompleteUntilCompleted(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	a1, b1, a2 := record(t, p, 1), record(t, p, 2), record(t, p, 1)
	assert.Equal(t, []allocator.Event{1, 2, 3}, []allocator.Event{a1, b1, a2}, "ids are deterministic")
	assert.Equal(t, 3, p.PendingEvents())

	// Querying does not advance anything.
	for range 3 {
		assert.False(t, query(t, p, a1))
		assert.False(t, query(t, p, b1))
	}

	// Completing stream 1 completes only what was recorded on it so far.
	p.CompleteEvents(1)
	a3 := record(t, p, 1)
	assert.True(t, query(t, p, a1))
	assert.True(t, query(t, p, a2))
	assert.False(t, query(t, p, b1))
	assert.False(t, query(t, p, a3))
	assert.Equal(t, 2, p.PendingEvents())

	// A completed event is forgotten once seen complete.
	_, err := p.QueryEvent(a1)
	requireDeviceError(t, err, "cudaEventQuery", "cudaErrorInvalidResourceHandle")

	p.CompleteAllEvents()
	assert.Equal(t, 0, p.PendingEvents())
	assert.True(t, query(t, p, b1))
	assert.True(t, query(t, p, a3))
}

func TestCompleteEventFollowsStreamOrder(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)
	a1, b1, a2, a3 := record(t, p, 1), record(t, p, 2), record(t, p, 1), record(t, p, 1)
	require.True(t, p.CompleteEvent(a2))
	assert.True(t, query(t, p, a1), "earlier on the same stream")
	assert.True(t, query(t, p, a2))
	assert.False(t, query(t, p, a3), "later on the same stream")
	assert.False(t, query(t, p, b1), "another stream")
	assert.False(t, p.CompleteEvent(a1), "already forgotten")
}

func TestSynchronisingCallsCompleteEvents(t *testing.T) {
	g := newGPU(t, giB)
	p := newProcess(t, g)

	// cudaEventSynchronize: that event and the ones before it on its stream.
	a1, b1, a2, a3 := record(t, p, 1), record(t, p, 2), record(t, p, 1), record(t, p, 1)
	require.NoError(t, p.SynchronizeEvent(a2))
	_, err := p.QueryEvent(a2)
	requireDeviceError(t, err, "cudaEventQuery", "cudaErrorInvalidResourceHandle")
	assert.True(t, query(t, p, a1))
	assert.False(t, query(t, p, a3))
	assert.False(t, query(t, p, b1))

	// cudaStreamSynchronize: its stream only.
	require.NoError(t, p.SynchronizeStream(1))
	assert.True(t, query(t, p, a3))
	assert.False(t, query(t, p, b1))

	// cudaFree synchronises the device: everything of this process, and
	// nothing of another's.
	q := newProcess(t, g)
	qe := record(t, q, 2)
	seg, err := p.Malloc(2 * miB)
	require.NoError(t, err)
	require.NoError(t, p.Free(seg))
	assert.True(t, query(t, p, b1))
	assert.False(t, query(t, q, qe))

	// A failed cudaFree synchronises nothing.
	c1 := record(t, p, 3)
	require.Error(t, p.Free(seg))
	assert.False(t, query(t, p, c1))
}

func TestUnknownEvents(t *testing.T) {
	g := newGPU(t, giB)
	p, q := newProcess(t, g), newProcess(t, g)
	_, err := p.QueryEvent(42)
	requireDeviceError(t, err, "cudaEventQuery", "cudaErrorInvalidResourceHandle")
	requireDeviceError(t, p.SynchronizeEvent(42), "cudaEventSynchronize", "cudaErrorInvalidResourceHandle")
	assert.False(t, p.CompleteEvent(42))

	// Events belong to their process.
	e := record(t, q, 0)
	requireDeviceError(t, p.SynchronizeEvent(e), "cudaEventSynchronize", "cudaErrorInvalidResourceHandle")
	require.NoError(t, q.SynchronizeEvent(e))
	requireDeviceError(t, q.SynchronizeEvent(e), "cudaEventSynchronize", "cudaErrorInvalidResourceHandle")
}

func TestEventsCompleteImmediately(t *testing.T) {
	g := newGPU(t, giB, func(o *gpu.Options) { o.EventsCompleteImmediately = true })
	p := newProcess(t, g)
	e := record(t, p, 7)
	assert.Equal(t, 0, p.PendingEvents())
	assert.True(t, query(t, p, e))
	_, err := p.QueryEvent(e)
	assert.Error(t, err, "still forgotten once seen")
}

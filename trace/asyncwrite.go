package trace

import (
	"io"
	"sync"
)

// asyncWriter writes buffers to w on a goroutine of its own, so that the
// snapshot writer encodes the next buffer while the last one is written:
// the kernel's copy of a 1 GB snapshot into the page cache takes as long
// as encoding it. Buffers go round: swap hands a full one over and
// returns an empty one, waiting only when all of them are in flight.
// After the first error of w nothing more is written; swap returns it from
// then on, and close returns it once every buffer handed over is done.
type asyncWriter struct {
	w    io.Writer
	todo chan []byte
	free chan []byte
	done chan struct{}

	mu  sync.Mutex
	err error
}

// asyncBuffers is how many buffers go round: one being filled, the rest
// waiting or being written.
const asyncBuffers = 4

func newAsyncWriter(w io.Writer, size int) *asyncWriter {
	a := &asyncWriter{w: w, todo: make(chan []byte, asyncBuffers), free: make(chan []byte, asyncBuffers), done: make(chan struct{})}
	for i := 1; i < asyncBuffers; i++ {
		a.free <- make([]byte, 0, size)
	}
	go a.run()
	return a
}

func (a *asyncWriter) run() {
	defer close(a.done)
	for b := range a.todo {
		if a.error() == nil {
			if _, err := a.w.Write(b); err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
		}
		a.free <- b[:0]
	}
}

func (a *asyncWriter) error() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// swap hands full over to be written and returns an empty buffer.
func (a *asyncWriter) swap(full []byte) ([]byte, error) {
	a.todo <- full
	return <-a.free, a.error()
}

// close waits for the buffers handed over and returns the first error.
func (a *asyncWriter) close() error {
	close(a.todo)
	<-a.done
	return a.err
}

//go:build !cgo

package main

// Without cgo there is no C side to defer frees (freequeue.go): every free
// is applied at its call.

type freeQueue struct{}

func newFreeQueue() *freeQueue { return nil }

func (q *freeQueue) release() {}

func (l *library) drain() {}

func (l *library) lockDrained(d *device) { d.mu.Lock() }

func (l *library) noteStreamed(int64) {}

package workers

import (
	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// meter is the allocator.Device (and VirtualMemory) a worker's allocator runs
// on: its gpu.Process, with a count of the calls made. Most events are served
// from the cache and make no device call at all; the count tells the worker
// when it must ask the process for its modelled call time (a snapshot of the
// process's counters, too costly to take after every event).
type meter struct {
	p     *gpu.Process
	calls uint64
}

func (m *meter) Malloc(size uint64) (uint64, error) { m.calls++; return m.p.Malloc(size) }
func (m *meter) Free(addr uint64) error             { m.calls++; return m.p.Free(addr) }
func (m *meter) MemGetInfo() (free, total uint64, err error) {
	m.calls++
	return m.p.MemGetInfo()
}
func (m *meter) RecordEvent(s allocator.Stream) (allocator.Event, error) {
	m.calls++
	return m.p.RecordEvent(s)
}
func (m *meter) QueryEvent(e allocator.Event) (bool, error) { m.calls++; return m.p.QueryEvent(e) }
func (m *meter) SynchronizeEvent(e allocator.Event) error   { m.calls++; return m.p.SynchronizeEvent(e) }

// Granularity is a device property asked once; the process does not count it.
func (m *meter) Granularity() uint64 { return m.p.Granularity() }
func (m *meter) ReserveAddress(size uint64) (uint64, error) {
	m.calls++
	return m.p.ReserveAddress(size)
}
func (m *meter) FreeAddress(addr, size uint64) error { m.calls++; return m.p.FreeAddress(addr, size) }
func (m *meter) CreatePage(size uint64) (allocator.PageHandle, error) {
	m.calls++
	return m.p.CreatePage(size)
}
func (m *meter) Map(addr uint64, h allocator.PageHandle) error { m.calls++; return m.p.Map(addr, h) }
func (m *meter) SetAccess(addr, size uint64) error             { m.calls++; return m.p.SetAccess(addr, size) }
func (m *meter) Unmap(addr, size uint64) error                 { m.calls++; return m.p.Unmap(addr, size) }
func (m *meter) Release(h allocator.PageHandle) error          { m.calls++; return m.p.Release(h) }
func (m *meter) SynchronizeStream(s allocator.Stream) error {
	m.calls++
	return m.p.SynchronizeStream(s)
}

// ComputeProcesses lists the GPU's processes for the OOM message's
// "Process N has X memory in use." clauses, when several share the GPU:
// the case where the message must say who holds the memory. A process
// alone gets the message without them, as the BERT-family study's workers
// printed it. PIDs are the GPU's process numbers plus 1000 (fake, stable
// for a run). It is no device call: NVML is not the CUDA driver.
func (m *meter) ComputeProcesses() []allocator.ProcessMemory {
	live := m.p.GPU().Processes()
	if len(live) < 2 {
		return nil
	}
	out := make([]allocator.ProcessMemory, 0, len(live))
	for _, q := range live {
		out = append(out, allocator.ProcessMemory{PID: 1000 + q.ID(), Used: q.Used(), Self: q == m.p})
	}
	return out
}

var (
	_ allocator.ProcessLister = (*meter)(nil)
	_ allocator.Device        = (*meter)(nil)
	_ allocator.VirtualMemory = (*meter)(nil)
)

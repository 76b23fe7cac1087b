package replay

import (
	"fmt"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// Process is the device one traced device replays on: what the replay, its
// address-translating device (device.go), the Recorders and the profiler
// need of it. *gpu.Process (the default, a simulated GPU) satisfies it; so
// does the real GPU of package realgpu (sim/replay/realgpu), over the CUDA
// driver.
//
// Contract, beyond allocator.Device and allocator.VirtualMemory:
//
//   - Addresses it hands out (Malloc, ReserveAddress) never overlap the
//     recorded addresses of a trace, which are CUDA pointers of another
//     process, below 2^56: the device wrapper gives a segment either its
//     recorded address or the process's own, and a table of ranges between
//     the two must stay unambiguous. The simulated GPU starts at 2^56; the
//     real one shifts the driver's pointers there.
//   - CompleteEvents(s) is the replay's clock, not a device call: every
//     event recorded on stream s so far counts as complete from now on
//     (the trace says the stream's work finished: a stream_sync, or the
//     free_completed of a block the replay made wait on a private stream).
//     Until then, or until a synchronising call (SynchronizeStream,
//     SynchronizeEvent, Free, which synchronises the device as cudaFree
//     does), QueryEvent must report an event incomplete: the decisions of
//     record_stream frees depend on it. It is not counted in Counters.
//   - Counters returns the device calls made so far, per gpu.Call kind,
//     with their time (modelled by the simulator; measured wall time on a
//     real GPU, see ProcessInfo). The replay subtracts the calls of the
//     restore.
type Process interface {
	allocator.Device
	allocator.VirtualMemory
	CompleteEvents(s allocator.Stream)
	Counters() gpu.Counters
}

var _ Process = (*gpu.Process)(nil)

// ProcessInfo describes the device behind a Process, for reports. A Process
// may implement Describer; one that does not (the simulated GPU) is
// described as the replay configured it: its capacity from
// Options.Capacity, the trace header or UnknownCapacity, modelled time.
type ProcessInfo struct {
	// Name names the device ("NVIDIA H200, cuda:0"); empty for a simulated
	// one.
	Name string
	// Capacity is the memory the replay may use, in bytes, and
	// CapacitySource why ("device memory": all of a real GPU's memory;
	// "option": a limit asked for).
	Capacity       uint64
	CapacitySource string
	// MeasuredTime says that Counters' times are wall time measured around
	// the driver calls, not the simulator's cost model.
	MeasuredTime bool
}

// Describer is implemented by a Process that can say what it is.
type Describer interface {
	Info() ProcessInfo
}

// NewProcessFunc makes the Process on which the trace's device replays.
// capacity is what the replay would give a simulated device (Options.
// Capacity, else the trace header's, else UnknownCapacity) and source says
// which ("option", "trace header", "implied by oom at event N",
// "unknown"); a real device may ignore both, and then describes its own
// (Describer).
type NewProcessFunc func(device int32, capacity uint64, source string) (Process, error)

// newSimProcess is the default NewProcessFunc: a simulated GPU of that
// capacity per device, without a context's overhead, whose addresses start
// at 2^56.
func newSimProcess(device int32, capacity uint64, _ string) (Process, error) {
	card, err := gpu.New(gpu.Options{
		Name:              fmt.Sprintf("replay device %d", device),
		Capacity:          capacity,
		NoContextOverhead: true,
		AddressBase:       replayAddressBase,
	})
	if err != nil {
		return nil, err
	}
	p, err := card.NewProcess()
	if err != nil {
		return nil, err
	}
	return p, nil
}

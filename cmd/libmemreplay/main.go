// Command libmemreplay is memreplay's caching allocator as a shared library
// that PyTorch loads in place of its own CUDA caching allocator:
//
//	go build -buildmode=c-shared -o dist/libmemreplay.so ./cmd/libmemreplay
//
//	alloc = torch.cuda.memory.CUDAPluggableAllocator(
//	    "dist/libmemreplay.so", "memreplay_malloc", "memreplay_free")
//	torch.cuda.memory.change_current_allocator(alloc)
//
// (python/memreplay_torch.py does this and wires the optional hooks; the
// C ABI is memreplay.h, the user's guide docs/libmemreplay.md.)
//
// # The mechanism
//
// PyTorch's CUDAPluggableAllocator calls two C functions through
// std::function: alloc_fn(size, device, stream) for every block a tensor
// needs, and free_fn(ptr, size, device, stream) when the storage dies, plus
// optional hooks for torch.cuda.empty_cache (reset_fn),
// set_per_process_memory_fraction, Tensor.record_stream and CUDA
// initialisation. It does no caching of its own. This library answers those
// calls with the allocator package, which makes PyTorch's own caching
// decisions (pools, best fit, splitting, segment sizes, the retry chain,
// expandable segments) under settings read from MEMREPLAY_ALLOC_CONF (in
// PYTORCH_CUDA_ALLOC_CONF syntax, falling back to PyTorch's variables), on
// the real GPU through allocator/cuda: the driver, dlopen'ed at run time,
// and the device's primary context, which is the one PyTorch's kernels run
// in, so the blocks are ordinary device memory to them.
//
// Layers, from the C caller inward:
//
//   - shim.c: the exported C functions with PyTorch's exact signatures
//     (memreplay.h). They pass pointers and streams as uintptr_t into Go
//     and turn the integers that come back into pointers, so Go never
//     makes an unsafe.Pointer from a device address. memreplay_free does
//     not enter Go: it queues the pointer in a ring in C memory
//     (freequeue.h), and the next call into Go from any thread applies the
//     queued frees first (freequeue.go), so a free and the next malloc
//     cost one crossing.
//   - exports.go: one //export Go function per C function, which recovers
//     any panic into last_error (nothing unwinds into the caller) and calls
//     the library.
//   - lib.go: the library. Per device ordinal, a lazily opened cuda.Device,
//     one allocator.Allocator and a table from every pointer it handed out
//     to its *allocator.Block, since free_fn and record_stream receive only
//     the pointer (ptrtable.go, an open-addressing hash table). One mutex
//     per device guards both, like PyTorch's per-device lock (the
//     allocator, built WithoutLocking, takes none of its own), because
//     PyTorch calls from the Python thread, autograd's device threads and
//     others at once.
//   - record.go: the optional recording, on when MEMREPLAY_TRACE or
//     MEMREPLAY_RECORD=1 is set: replay.Record turns each allocator
//     decision into a trace event, kept in a per-device ring of about
//     MEMREPLAY_MAX_ENTRIES events (1,000,000 by default, like PyTorch's
//     max_entries: the oldest are dropped, and the trace then starts from
//     a layout snapshot taken at its first event). recdevice.go gives each
//     record_stream a stream of its own and records when its event was
//     seen complete, so that a replay returns the block at the same point.
//     memreplay_write_trace writes the events with the layout at that
//     moment as a native memreplay trace, which `memreplay replay --check`
//     reproduces decision for decision; memreplay_write_snapshot writes a
//     PyTorch snapshot pickle for pytorch.org/memory_viz. With
//     memreplay_stats_json they stand in for torch.cuda.memory_stats,
//     _record_memory_history and _dump_snapshot, which refuse to work with
//     a pluggable allocator.
//
// # The hot path
//
// A cached malloc and free cost, besides the allocator's own work: one C
// to Go transition (the price of cgo's callback path, about 50 to 60 ns
// here; the free is queued in C, a compare-and-swap), the queue's lock,
// the device's lock once for the queued free and the malloc together, one
// atomic store to apply the free, an atomic load for the library and one
// for the device, a probe each to insert and remove the pointer, and two
// deferred recovers. docs/performance.md ("Deferred frees" and "The C ABI
// pair, next round") has the figures. Nothing is allocated on the Go heap in steady state. When recording, each call also
// takes the device's recording lock shared, and each event costs a clock
// read and a ring slot under a small mutex. docs/libmemreplay.md has the
// measured figures.
//
// # Failures
//
// No call crashes the host. Every failure leaves its message for
// memreplay_last_error (the latest from any thread) and prints it on stderr
// unless MEMREPLAY_QUIET=1: a bad MEMREPLAY_ALLOC_CONF (reported once, at
// the first call; every malloc then fails with it), a driver or device that
// cannot be opened, an out-of-memory error (PyTorch's message, from the
// allocator's *OutOfMemoryError), a free or record_stream of a pointer
// that is not live (a queued free is reported by the call that applies
// it; memreplay_last_error applies the queue first). A failed malloc returns NULL to a C caller, but throws
// a C++ std::runtime_error with the message when the host has the C++
// runtime loaded, because PyTorch does not check alloc_fn's result (shim.c
// explains; MEMREPLAY_OOM=null turns this off). A size of 0 returns NULL
// without an error, as PyTorch's allocator returns a null pointer for it.
//
// # Threads
//
// Any thread may call any function. Go's runtime binds each calling C
// thread to an M on its first call (the first call in the process also
// waits for the runtime to start, about 0.3 ms); the CUDA context is made
// current inside each driver call (allocator/cuda), so no thread affinity
// is needed. Go code must not run in a child forked from a process that
// loaded the library (DataLoader workers do not allocate on the GPU, so
// they never call in).
package main

func main() {}

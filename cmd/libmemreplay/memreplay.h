/*
 * memreplay.h: the C ABI of libmemreplay.so, memreplay's caching allocator
 * as a PyTorch CUDAPluggableAllocator (see docs/libmemreplay.md).
 *
 * memreplay_malloc and memreplay_free have exactly the signatures
 * torch.cuda.memory.CUDAPluggableAllocator loads:
 *   std::function<void*(size_t, int, cudaStream_t)>
 *   std::function<void(void*, size_t, int, cudaStream_t)>
 * and the hooks those of the _CUDAPluggableAllocator setters (set_init_fn,
 * set_reset_fn, set_memory_fraction_fn, set_record_stream_fn).
 *
 * No function crashes the process on bad input: failures return NULL or a
 * non-zero int and leave a message for memreplay_last_error. memreplay_malloc
 * is the one exception to "return NULL", by design: when the process has the
 * C++ runtime loaded (PyTorch always has) and MEMREPLAY_OOM is not "null",
 * a failed malloc throws std::runtime_error, because PyTorch does not check
 * the pointer a pluggable allocator returns (see docs/libmemreplay.md).
 *
 * memreplay_free queues the pointer in memory of its own and returns
 * without entering the Go runtime; the next call of any function here,
 * from any thread, applies the queued frees before its own work. So a
 * free is never seen as pending by a later call, and an error of a free
 * (a double free, an unknown pointer) is reported by that next call:
 * memreplay_last_error applies the queue first. While recording
 * (MEMREPLAY_TRACE, MEMREPLAY_RECORD=1), and while a live block has a use
 * on another stream (memreplay_record_stream), each free is applied at
 * its call.
 */
#ifndef MEMREPLAY_H
#define MEMREPLAY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream type, declared as cuda_runtime_api.h does (an
 * identical typedef may be repeated), so no CUDA header is needed. */
typedef struct CUstream_st *cudaStream_t;

/* The allocator: PyTorch's alloc_fn and free_fn. */
void *memreplay_malloc(size_t size, int device, cudaStream_t stream);
void memreplay_free(void *ptr, size_t size, int device, cudaStream_t stream);

/* PyTorch's optional hooks: init_fn, reset_fn (torch.cuda.empty_cache),
 * memory_fraction_fn (torch.cuda.set_per_process_memory_fraction) and
 * record_stream_fn (Tensor.record_stream). */
void memreplay_init(int device_count);
void memreplay_empty_cache(void);
void memreplay_set_memory_fraction(double fraction, int device);
void memreplay_record_stream(void *ptr, cudaStream_t stream);

/* Introspection. memreplay_stats_json returns torch.cuda.memory_stats()'s
 * flattened keys as a JSON object (free it with memreplay_free_string), or
 * NULL. The writers return 0 on success; a NULL or empty path means
 * $MEMREPLAY_TRACE (write_trace) or $MEMREPLAY_SNAPSHOT (write_snapshot).
 * memreplay_last_error returns the most recent failure's message from any
 * thread ("" if none), in a buffer of the calling thread that stays valid
 * until that thread calls memreplay_last_error again. */
char *memreplay_stats_json(int device);
void memreplay_free_string(char *s);
int memreplay_write_trace(const char *path);
int memreplay_write_snapshot(const char *path);
const char *memreplay_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMREPLAY_H */

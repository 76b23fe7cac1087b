// Package allocator is a caching GPU memory allocator that makes the same
// decisions as PyTorch's native CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp, as specified in
// docs/pytorch-caching-allocator.md), so that a recorded PyTorch trace
// replayed through it predicts PyTorch's reserved memory, splits, retries and
// out-of-memory errors. It knows devices only through the Device interface.
//
// # The mechanism
//
// One Allocator serves one device. Memory comes from the device in segments:
// a cudaMalloc of 2 MiB for requests up to 1 MiB (the small pool), of 20 MiB
// for requests below 10 MiB, and of the request rounded up to 2 MiB above
// that (the large pool). A segment is tiled by a doubly linked chain of
// blocks (prev/next); each block is allocated, free, or freed-but-pending
// (waiting for events recorded on streams that used it).
//
// Every request is first rounded (RoundSize: at least 512 bytes, a multiple
// of 512, or a power-of-two division when roundup_power2_divisions says so).
// Free blocks live in their pool's free set, ordered by (stream, size,
// address). A request takes the first block at or after (stream, size, 0):
// the smallest block of the same stream that fits, lowest address first. A
// block freed on one stream never serves another.
//
// When the chosen block is larger than the request it is split: the front
// becomes the allocation and the tail returns to the free set. Small-pool
// blocks split when at least 512 bytes remain; large-pool blocks only when
// more than 1 MiB remains and the request is below max_split_size. Blocks of
// at least max_split_size are never split and serve only requests that are
// themselves at least max_split_size and within max_non_split_rounding_mb
// of them (the oversize slack).
//
// Freeing a block merges it with a free neighbour, the previous one first,
// then the next, and returns the result to the free set. A block that was
// used on other streams (RecordStream) is not freed at once: one event is
// recorded per stream and the block returns to the pool when all have
// completed (free_requested, then later free_completed).
//
// When no cached block fits, malloc falls back in a fixed order, and the
// order decides what a trace shows:
//
//  1. garbage collection of old whole free segments, when a memory fraction
//     and garbage_collection_threshold are both set;
//  2. a new segment (or, with expandable segments, new mapped pages);
//  3. with max_split_size set, releasing cached oversize blocks and trying
//     again;
//  4. releasing every fully free cached segment (what empty_cache does,
//     after waiting for all pending events), then a retry that counts in
//     num_alloc_retries;
//  5. an OutOfMemoryError, counted in num_ooms, with PyTorch's message.
//
// With expandable_segments:True there is one virtual address reservation
// (1.125 times the device memory) per stream and pool, grown page by page
// (2 MiB pages for the small pool, 20 MiB for the large) at the lowest
// address that fits, and shrunk by unmapping whole free pages. Unmapped
// ranges are blocks too, kept in the pool's unmapped set ordered by
// (stream, address), so the chain always covers the whole reservation.
//
// Statistics follow torch.cuda.memory_stats() key by key, including when
// each changes (allocated_bytes at free request, active_bytes at free
// completion, inactive_split only for non-expandable segments). Snapshot
// reports segments and blocks in PyTorch's shape. Observers see the same
// trace entries PyTorch records (alloc, free_requested, free_completed,
// segment_alloc/free/map/unmap, oom), and, when they ask (Requests), the
// record_stream and empty_cache calls PyTorch's trace leaves out, in their
// place among them: what a recording that a replay must follow needs.
//
// # Where the code may differ from PyTorch
//
// The decisions follow PyTorch 2.9 where versions differ (see
// docs/allocator.md). Not modelled: CUDA-graph private pools and MemPool,
// the free-memory callbacks (a no-op for everything but CUDA IPC),
// release_lock_on_cudamalloc (it changes no decision in one thread) and the
// per-process lines of the OOM message that need NVML.
//
// # Cost
//
// A cache hit does no device call: one lookup in the free set (a table
// probe for the common case of a size seen before), the split test and the
// statistics. The free set keeps, for each (stream, size), the free blocks
// of that size sorted by address, in an ordered two-level index over the
// (stream, size) keys whose leaves mark their non-empty buckets in a
// bitmap, for the lower-bound search when no block of the exact size is
// free (freeset.go, bucketindex.go). Block objects are recycled, so
// steady-state malloc and free allocate nothing on the Go heap; fresh
// blocks, segments and free-set nodes come from chunks (slab.go, which
// also says when an object may be reused), so that growing to a peak of
// thousands of blocks makes a few dozen heap objects. All methods take one
// mutex; the allocator is safe for concurrent use, and observers run under
// that mutex.
package allocator

// Package profiler measures where a replay's memory went: it implements
// sim/replay's Recorder, watches every allocation, free, out-of-memory error
// and (through an allocator observer) every segment the allocator obtains or
// releases, and at the end (Finish) hands back a plain, JSON-tagged Profile
// that profiler/report renders.
//
// # Figures
//
// Live bytes are the sizes (after rounding and splitting) of the blocks the
// program holds: + at Alloc, - at Free (the free request, as PyTorch's
// allocated_bytes counts it; a block waiting for record-stream events is no
// longer live). Requested bytes are the callers' unrounded sizes of the same
// blocks. Reserved bytes are what the allocator holds from the device:
// segment_alloc and segment_map add, segment_free and segment_unmap
// subtract, seen through an observer. Segments that Restore rebuilt before
// the first event emit no observer entries, so reserved is reset from the
// allocator's own statistics after each restored block is reported (Alloc
// with index -1) and at the device's first event after Attach.
//
//   - peak live bytes: the most bytes live at once, the lower bound of what
//     any allocator needs; peak reserved bytes: the most held from the device.
//     Each comes with the index of the event where it was first reached.
//   - waste ratio = 1 - peak_live/peak_reserved (0 when nothing was
//     reserved): the share of the device memory the allocator needed beyond
//     the program's own peak. The two peaks may fall at different events.
//   - internal waste = live - requested: rounding and unsplit remainders
//     inside allocated blocks; reported at the peak and as a maximum.
//   - external fragmentation = 1 - largest_free/total_free over the cached
//     (free, mapped) blocks (allocator.FreeSummary): 0 when the free bytes
//     are one block, close to 1 when they are many small ones. It is sampled
//     on the timeline, at every out-of-memory error and at the peak.
//   - stranded bytes: the free bytes of segments that hold at least one live
//     block. empty_cache cannot return them (the live blocks pin the
//     segment); they are "reserved but unallocated" memory that only the
//     owners' frees can release. Blocks waiting for record-stream events
//     count as stranded, since they are not live. For an expandable segment
//     each mapped run counts as a segment, and whole free pages inside a run
//     could still be unmapped, so there the figure is an upper bound.
//
// # "At peak"
//
// The peak moment is the event where live bytes first reached their
// maximum: the moment the program needed the most memory, so what the
// allocator did with the rest of its reservation then (largest free block,
// stranded bytes, which sites held what) is what decides whether a larger
// request would have fit. (The moment of peak reserved bytes says less: it
// is often just after a new segment was cut for a request that then shrank
// back.) Per device the peak is the device's own; for the total over
// devices it is the event of the largest sum of live bytes, where the
// largest free block is the largest on any one device (a block cannot span
// devices).
//
// Live, requested and reserved bytes at the peak are kept incrementally.
// The rest (free blocks, stranded bytes, bytes per site) needs the
// allocator's segments and blocks as they were at the peak. Reading them at
// every new peak would be quadratic: in a training loop's first iteration
// nearly every allocation is a new peak, with temporaries freed in between,
// so "capture at the next free" would walk the whole state once per
// activation (a ramp of 10,000 activations took 6.8 s that way). Instead a
// new peak marks a position in the device's undo log, which from then on
// records every change to blocks and segments: allocations, frees,
// record-stream blocks returning to their pool (observer's free_completed),
// segments obtained and released, expandable pages mapped and unmapped. A
// later peak moves the mark and drops the older entries. The state at the
// peak is reconstructed once, at Finish or when the log has grown longer
// than the state (so the cost is O(1) per event amortized): the
// allocator's current snapshot with the log undone newest first. The result
// is exact whatever happened after the peak, empty_cache and OOM
// releases included (capture.go). Free blocks are then the gaps between
// active blocks inside each segment or mapped run: the allocator merges
// free neighbours, so each gap is one free block, as FreeSummary counts
// them (checked by TestReconstructMatchesEager).
//
// A capture also keeps the walk itself (Capture.Layout): each segment or
// mapped run with its active blocks, their offsets, sizes and sites, from
// which the HTML report draws its segment map.
//
// # Retries and time
//
// The allocator retries a device allocation only after releasing its
// whole cache, and a retry that releases nothing fails with an OOM; so
// the profiler reads num_alloc_retries after the events that released a
// segment or failed, and dates each retry (Profile.Retries) without
// reading the statistics at every event. Timeline samples carry the
// recorded time of their last event (Sample.TimeUS) when the trace has
// times.
//
// # Attribution to allocation sites
//
// A site is a recorded stack (trace.StackID); 0 means no stack. Each live
// block at the peak belongs to the site that allocated it. The stranded
// bytes of a segment are divided among the sites of the segment's live
// blocks in proportion to their bytes (the remainder of the integer division
// goes to the largest block). Every one of those blocks pins the segment,
// and none alone would be enough to free it, so the proportional share is
// the fair split, and the shares add up exactly to the stranded total.
// The site that created the segment was not chosen: it has often freed its
// block long before the peak, and blaming it would point at code that no
// longer holds any memory.
//
// Site frames are reported innermost first, as PyTorch records them, after
// dropping the frames PyTorch's own memory_viz hides (the unwinder, the
// dispatcher's boxing and Register* wrappers, the Python interpreter's
// C frames) and the allocator's own frames at the innermost end; see
// TrimFrames and SiteLabel.
//
// # Cost
//
// Alloc, Free and Step do O(1) work and allocate nothing in steady state:
// per-device state lives in a slice indexed by device, per-site counters in
// a slice indexed by StackID, the block address -> site map in an open
// addressing table, and the undo log is appended to only while a peak is
// pending. The timeline holds at most Options.MaxSamples samples:
// it starts with one sample per event and, each time it is full, merges
// neighbouring samples and doubles the interval, because the length of a
// streamed trace is not known up front. A sample keeps the instantaneous
// values at its last event and the maxima over its interval, so no peak
// falls between samples.
//
// A Profiler serves one replay on one goroutine, like the replay itself.
package profiler

// Package report renders a replay and its profile: a terminal table
// (WriteTable, with github.com/olekukonko/tablewriter), Markdown
// (WriteMarkdown), one JSON object (WriteJSON), several configurations side
// by side (WriteCompareTable, WriteCompareJSON), a pprof profile
// (WritePprof, with github.com/google/pprof/profile) and a self-contained
// HTML page (WriteHTML; its design is in html.go, its use in
// docs/report.md).
//
// The figures are profiler's (see its package comment for live, reserved,
// stranded bytes and what "at peak" means) and the allocator's statistics
// in PyTorch's memory_stats() names; this package only arranges them.
//
// # JSON
//
// WriteJSON writes the object that docs/DESIGN.md's contract describes:
//
//   - "stats": allocator.Stats.Map(), PyTorch's flattened keys. With one
//     device it is that device's; with several, each key is summed over the
//     devices (so a ".peak" is the sum of the devices' peaks, an upper bound
//     of the peak of the sum) except "max_split_size", which is a setting,
//     and each device's own map is in "devices"[i]."stats".
//   - "fragmentation": "peak_live_bytes", "peak_reserved_bytes",
//     "waste_ratio" (1 - peak_live/peak_reserved), "largest_free_block_bytes_at_peak",
//     "internal_waste_bytes_at_peak", "external_fragmentation_at_peak",
//     "stranded_bytes_at_peak" and more, over all devices (profiler's
//     Total).
//   - "events", "config" (the PYTORCH_CUDA_ALLOC_CONF string replayed, ""
//     for the defaults), "policy" (the allocator policy: "pytorch" unless
//     replay --policy chose another), "capacity" (the first device's bytes), "check"
//     (only when the replay checked decisions: "decisions_expected",
//     "decisions_matched", "first_divergence" null or {"event", "device",
//     "expected", "actual"}, "final_segments_match" true, false or null),
//     "ooms", "reconstructed" (null or the state rebuilt before a partial
//     trace), "retries" (the events where the allocator released its
//     cache and retried a device allocation: "event", "device", "count"),
//     "top_sites", "top_stranding_sites", "timeline", "devices",
//     "device_calls", "notes". The device calls' time is the simulator's
//     model or, on a real GPU (replay --device cuda), measured:
//     "device_calls"."time_source" says which ("modelled" or "measured"),
//     and the time is in "modelled_time_ns" or "measured_time_ns" (the
//     other 0); each of "devices" has its "time_source" and, on a real GPU,
//     its "name". Site lists and the captures' per-site
//     entries are cut to Input.Top (the pprof output has every site).
//
// Keys are snake_case and stable; new keys may be added, none removed.
//
// # pprof
//
// WritePprof writes one sample per (device, stream, site) at the device's
// peak and one per site over the run, with five sample types:
// inuse_space (live bytes at the peak), reserved_space (the bytes of the
// segments a site's blocks pinned at the peak: its live plus its share of
// the stranded bytes; cached segments with no live block belong to no site
// and are left out), waste_space (the stranded share alone), alloc_count
// and alloc_space (allocations over the run). inuse_space is the default.
// Frames are profiler.TrimFrames of the recorded stack from the site's own
// frame (profiler.SiteFrame) outwards, leaf first as pprof wants them
// (PyTorch records the innermost frame first too): the frames inside the
// site's are the allocator and ATen's allocation plumbing, the same for
// every site, so that pprof -top names the same sites as the tables.
// Numeric labels (device, stream) need anchored filters in pprof:
// -tagfocus=stream=^0$. With several devices each device's samples are at
// its own peak, so inuse_space's total is the sum of the devices' peaks;
// the profile's comments (pprof -comments) give each device's peak, that
// total, and the peak of the devices' sum at one moment, each labelled.
//
// # Several devices
//
// The table (figuresSection) has a column per device and one of their
// sums; compare (WriteCompareTable) and the HTML page give each device's
// figures with its capacity first, and label every sum: peaks summed at
// one moment, counts over all devices. A sum of peaks is never shown as
// if it were one GPU's.
package report

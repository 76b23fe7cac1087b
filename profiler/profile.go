package profiler

import (
	"github.com/memreplay/memreplay/trace"
)

// Profile is what Finish returns: plain data, JSON-tagged, with nothing
// that points back into the replay.
type Profile struct {
	// Events is the number of events the profiler saw (1 + the last index
	// passed to Step).
	Events int64 `json:"events"`
	// Total sums the devices (see the package comment for "at peak" over
	// several devices).
	Total Figures `json:"total"`
	// Devices lists each device the replay used, by index.
	Devices []DeviceProfile `json:"devices"`
	// Peak is the capture at the total peak (the device's own when there is
	// one device); nil when nothing was ever allocated.
	Peak *Capture `json:"peak"`
	// SampleEvery is the timeline's final interval in events.
	SampleEvery int64    `json:"sample_every"`
	Timeline    []Sample `json:"timeline"`
	// PeakDetail is the state after every event of a window around the
	// peak of live bytes (Options.DetailEvents), oldest first; nil when not
	// asked for, when nothing peaked, or when the replay used several
	// devices.
	PeakDetail []DetailPoint `json:"peak_detail,omitempty"`
	// OOMs are the replay's out-of-memory errors in order, at most
	// Options.MaxOOMs of them; OOMsDropped counts the rest.
	OOMs        []OOMSnapshot `json:"ooms"`
	OOMsDropped int64         `json:"ooms_dropped"`
	// Sites lists every site that allocated, sorted by bytes held at the
	// peak (live plus stranded), then by bytes allocated over the run.
	Sites []Site `json:"sites"`
	// Retries are the events where the allocator freed its cache and
	// retried a device allocation (num_alloc_retries went up), at most
	// Options.MaxOOMs of them; RetriesDropped counts the rest.
	Retries        []Retry `json:"retries"`
	RetriesDropped int64   `json:"retries_dropped"`
	// Markers are the trace's record_function annotations in event order:
	// PyTorch ≥ 2.6's external_annotations (trace.Annotation, handed over
	// with Profiler.Annotations) and ≈2.4's user_defined entries of their
	// shape (trace.AnnotationStage), at most Options.MaxAnnotations of
	// them; MarkersDropped counts the annotations beyond. Other markers
	// (snapshot entries, memreplay's own) are neither listed nor counted.
	// Both are left out of the JSON when empty (see markers.go).
	Markers        []Marker `json:"markers,omitempty"`
	MarkersDropped int64    `json:"markers_dropped,omitempty"`
}

// Marker is one record_function annotation.
type Marker struct {
	// Event is the marker's event index, or, for a trace.Annotation
	// (beside the events), its Event: the index of the event it comes
	// right before.
	Event  int64  `json:"event"`
	Device int32  `json:"device"`
	TimeUS int64  `json:"time_us"`
	Label  string `json:"label"`
	// Stage is START or END: the annotation's stack is the one frame
	// {filename: label, line: 0, name: stage} (trace.AnnotationStage).
	Stage string `json:"stage"`
	stack trace.StackID
}

// Retry is one event at which a device's allocator retried.
type Retry struct {
	Event  int64 `json:"event"`
	Device int32 `json:"device"`
	// Count is how many retries the event made (one per failed malloc).
	Count int64 `json:"count"`
}

// Figures are the headline numbers of one device or of all of them.
type Figures struct {
	PeakLiveBytes     uint64 `json:"peak_live_bytes"`
	PeakLiveEvent     int64  `json:"peak_live_event"` // -1: reached by the restored initial state
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	PeakReservedEvent int64  `json:"peak_reserved_event"`
	// WasteRatio is 1 - PeakLiveBytes/PeakReservedBytes, 0 with nothing
	// reserved.
	WasteRatio float64 `json:"waste_ratio"`

	// At the peak of live bytes.
	ReservedBytesAtPeak         uint64  `json:"reserved_bytes_at_peak"`
	RequestedBytesAtPeak        uint64  `json:"requested_bytes_at_peak"`
	FreeBytesAtPeak             uint64  `json:"free_bytes_at_peak"`
	LargestFreeBlockBytesAtPeak uint64  `json:"largest_free_block_bytes_at_peak"`
	StrandedBytesAtPeak         uint64  `json:"stranded_bytes_at_peak"`
	InternalWasteBytesAtPeak    uint64  `json:"internal_waste_bytes_at_peak"`
	ExternalFragmentationAtPeak float64 `json:"external_fragmentation_at_peak"`

	// Over the run.
	MaxInternalWasteBytes    uint64  `json:"max_internal_waste_bytes"`
	MaxExternalFragmentation float64 `json:"max_external_fragmentation"` // over the samples, peaks and OOMs
	Allocs                   uint64  `json:"allocs"`
	Frees                    uint64  `json:"frees"`

	// At the end.
	FinalLiveBytes      uint64 `json:"final_live_bytes"`
	FinalReservedBytes  uint64 `json:"final_reserved_bytes"`
	FinalRequestedBytes uint64 `json:"final_requested_bytes"`

	// From the allocator's statistics and the process's counters (the
	// simulated or the real device's), read at Finish.
	AllocRetries  int64  `json:"alloc_retries"`
	OOMs          int64  `json:"ooms"`
	DeviceMallocs uint64 `json:"device_mallocs"` // cudaMalloc calls
	DeviceFrees   uint64 `json:"device_frees"`   // cudaFree calls
	DeviceMaps    uint64 `json:"device_maps"`    // cuMemMap calls (expandable segments)
	DeviceUnmaps  uint64 `json:"device_unmaps"`  // cuMemUnmap calls
	// DeviceTimeNS is the time of every device call, in nanoseconds:
	// modelled by the simulator's cost model, or, when DeviceTimeMeasured,
	// wall time measured around the driver calls of a real GPU.
	DeviceTimeNS       int64 `json:"device_time_ns"`
	DeviceTimeMeasured bool  `json:"device_time_measured"`
}

// DeviceProfile is one device's figures and its peak capture.
type DeviceProfile struct {
	Index int32 `json:"index"`
	Figures
	Peak *Capture `json:"peak"`
}

// Capture is the allocator's state at one moment, a peak or an OOM, as
// reconstructed (see capture.go): exact, whatever happened after it.
type Capture struct {
	// Event is the moment described: the event index of the peak or of the
	// OOM (-1: the restored initial state).
	Event int64 `json:"event"`

	LiveBytes             uint64  `json:"live_bytes"`
	RequestedBytes        uint64  `json:"requested_bytes"`
	ReservedBytes         uint64  `json:"reserved_bytes"`
	FreeBytes             uint64  `json:"free_bytes"` // cached free blocks, as FreeSummary counts them
	LargestFreeBlockBytes uint64  `json:"largest_free_block_bytes"`
	ExternalFragmentation float64 `json:"external_fragmentation"`
	StrandedBytes         uint64  `json:"stranded_bytes"`
	// Segments counts the segments (mapped runs) walked, PinnedSegments
	// those holding a live block.
	Segments       int `json:"segments"`
	PinnedSegments int `json:"pinned_segments"`
	// Sites lists live and stranded bytes per (device, stream, site),
	// largest first.
	Sites []SiteBytes `json:"sites"`
	// Layout is the state itself, for a segment map: every segment
	// (mapped run) by device and address with its active blocks. The
	// reports' JSON leaves it out (it has one entry per live block); the
	// HTML report draws it.
	Layout []SegmentLayout `json:"layout,omitempty"`
}

// SegmentLayout is one segment, or one mapped run of an expandable
// segment, at a capture. Its free blocks are the gaps between Blocks (the
// allocator merges free neighbours, so each gap is one free block).
type SegmentLayout struct {
	Device     int32  `json:"device"`
	Stream     uint64 `json:"stream"`
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	Expandable bool   `json:"expandable,omitempty"`
	// Blocks are the active blocks, by address.
	Blocks []BlockLayout `json:"blocks"`
}

// BlockLayout is one active block of a SegmentLayout.
type BlockLayout struct {
	// Offset is the block's address minus the segment's.
	Offset uint64 `json:"offset"`
	Size   uint64 `json:"size"`
	// Allocated is false for a block freed by the program but waiting for
	// record-stream events (active, not live).
	Allocated bool          `json:"allocated"`
	Stack     trace.StackID `json:"stack"`
}

// SiteBytes is one site's share of a capture on one device and stream.
type SiteBytes struct {
	Stack         trace.StackID `json:"stack"`
	Device        int32         `json:"device"`
	Stream        uint64        `json:"stream"`
	Blocks        int           `json:"blocks"`
	LiveBytes     uint64        `json:"live_bytes"`
	StrandedBytes uint64        `json:"stranded_bytes"`
}

// Site is one allocation site over the whole run.
type Site struct {
	Stack trace.StackID `json:"stack"`
	// Label is the site's most telling frame (SiteLabel), Frames its
	// trimmed frames innermost first, each "name (file:line)".
	Label  string   `json:"label"`
	Frames []string `json:"frames"`

	AllocCount uint64 `json:"alloc_count"`
	AllocBytes uint64 `json:"alloc_bytes"` // block sizes, summed over allocations
	// MaxLiveBytes is the most this site held at once on one device.
	MaxLiveBytes uint64 `json:"max_live_bytes"`
	// At the total peak (Profile.Peak).
	LiveBytesAtPeak     uint64 `json:"live_bytes_at_peak"`
	StrandedBytesAtPeak uint64 `json:"stranded_bytes_at_peak"`
	BlocksAtPeak        int    `json:"blocks_at_peak"`
}

// Sample is one point of the timeline.
type Sample struct {
	// Event is the last event of the sample's interval; the instantaneous
	// values are those after it, the Max values over the interval.
	Event int64 `json:"event"`
	// TimeUS is the recorded time of that event (microseconds since the
	// epoch; the latest recorded time when it has none), 0 when the trace
	// records no times.
	TimeUS                int64   `json:"time_us,omitempty"`
	LiveBytes             uint64  `json:"live_bytes"`
	ReservedBytes         uint64  `json:"reserved_bytes"`
	RequestedBytes        uint64  `json:"requested_bytes"`
	MaxLiveBytes          uint64  `json:"max_live_bytes"`
	MaxReservedBytes      uint64  `json:"max_reserved_bytes"`
	FreeBytes             uint64  `json:"free_bytes"`
	LargestFreeBlock      uint64  `json:"largest_free_block_bytes"`
	ExternalFragmentation float64 `json:"external_fragmentation"`
	// Devices has one entry per device when the replay used more than one.
	Devices []DeviceSample `json:"devices,omitempty"`
}

// DeviceSample is one device's part of a Sample.
type DeviceSample struct {
	Index            int32  `json:"index"`
	LiveBytes        uint64 `json:"live_bytes"`
	ReservedBytes    uint64 `json:"reserved_bytes"`
	MaxLiveBytes     uint64 `json:"max_live_bytes"`
	MaxReservedBytes uint64 `json:"max_reserved_bytes"`
	RequestedBytes   uint64 `json:"requested_bytes"`
	FreeBytes        uint64 `json:"free_bytes"`
	LargestFreeBlock uint64 `json:"largest_free_block_bytes"`
}

// OOMSnapshot is the state at one out-of-memory error, after the failure
// (the allocator has already released its cache and retried).
type OOMSnapshot struct {
	Event  int64 `json:"event"`
	Device int32 `json:"device"`
	// The request: the caller's size, rounded, and the segment size the
	// allocator asked of the device.
	RequestedBytes uint64 `json:"requested_bytes"`
	RoundedBytes   uint64 `json:"rounded_bytes"`
	AllocBytes     uint64 `json:"alloc_bytes"`

	LiveBytes             uint64  `json:"live_bytes"`
	ReservedBytes         uint64  `json:"reserved_bytes"`
	FreeBytes             uint64  `json:"free_bytes"`
	LargestFreeBlockBytes uint64  `json:"largest_free_block_bytes"`
	ExternalFragmentation float64 `json:"external_fragmentation"`
	DeviceFreeBytes       uint64  `json:"device_free_bytes"`
	DeviceTotalBytes      uint64  `json:"device_total_bytes"`
	// Capture walks the state, for the first Options.OOMCaptures OOMs.
	Capture *Capture `json:"capture,omitempty"`
}

// fragmentation is 1 - largest/total, 0 without free bytes.
func fragmentation(total, largest uint64) float64 {
	if total == 0 {
		return 0
	}
	return 1 - float64(largest)/float64(total)
}

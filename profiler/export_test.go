package profiler

import "github.com/memreplay/memreplay/allocator"

// Reconstructions counts the states the profiler rebuilt (capture.go).
func Reconstructions(p *Profiler) int { return p.ncap }

// Observe passes an allocator trace entry to a device's observer, as the
// allocator would (benchmarks of the recorder alone).
func Observe(p *Profiler, device int32, e allocator.TraceEntry) { p.devs[device].observe(e) }

// Package cputime reads the CPU time the process has used, for benchmarks
// that report events per CPU-second beside events per wall-second: on a
// shared machine the wall time moves with the other people's load (a
// thread waits for a free CPU), the CPU time much less.
package cputime

import "time"

// Process is the CPU time (user and system, every thread's, the Go
// runtime's own included) the process has used so far. ok is false where
// it is not measured (outside Unix); benchmarks then report wall time only.
func Process() (d time.Duration, ok bool) { return process() }

// Package layers is memreplay's import map written as data: which layer
// each package sits in, and the rule that every import points down.
//
// memreplay is six layers, bottom to top, one folder each:
//
//	cmd/        the CLI and the PyTorch plug-in: thin over everything below
//	profiler/   what a replay's memory did (profiler), then how it reads (profiler/report)
//	sim/        workloads on a device: the simulated GPU (sim/gpu), the replayer,
//	            the trial model, the worker pool, the PAR sweep, the study runner
//	allocator/  the caching allocator, its settings, the real CUDA device
//	trace/      the vocabulary: the trace model and its codecs
//	internal/   test machinery shared by several layers; the output-file writer;
//	            the CLI's collector floor
//
// Data flows up the same way: a trace file is decoded by trace, replayed by
// sim/replay through an allocator on a device (sim/gpu or allocator/cuda),
// observed by profiler, rendered by profiler/report, printed by cmd.
//
// A package may import a package of a lower layer, or of its own layer at a
// lower step: inside a folder the packages are ordered too (allocator/config
// below allocator below allocator/cuda; sim/gpu below sim/replay below
// sim/par). Nothing imports sideways or up. TestLayers (layers_test.go) walks
// every package of the module and fails on an import that breaks the rule,
// or on a package this table does not place, so a new package is placed on
// purpose. The rule binds each package's own code, what `go list -deps`
// shows and what a program linking memreplay gets. Tests may reach up where
// they test how layers meet: the allocator's tests run on the simulated
// device, the replay's benchmark attaches the profiler, the trial model's
// tests replay the traces it writes.
package layers

// A Place is where a package sits: its folder's layer and its step inside
// that folder. Higher imports lower; nothing else.
type Place struct {
	Layer int // 0 internal, 1 trace, 2 allocator, 3 sim, 4 profiler, 5 cmd
	Step  int // order inside the layer's folder
}

// Layer numbers, bottom to top.
const (
	Internal = iota
	Trace
	Allocator
	Sim
	Profiler
	Cmd
)

// Names of the layers, for messages and docs.
var Names = [...]string{"internal", "trace", "allocator", "sim", "profiler", "cmd"}

// Packages places every package of the module, by its path below the
// module root. Where a new package goes:
//   - an allocator policy: a file of package allocator behind allocator.Policy
//     (no new package);
//   - a trace importer or exporter: a file of package trace;
//   - a scheduler, planner or estimator that drives workloads on a device: a
//     package under sim/ named for what it is, at the step above what it uses;
//   - a renderer: profiler/report.
var Packages = map[string]Place{
	"internal/cputime":     {Internal, 0},
	"internal/datadriven":  {Internal, 0},
	"internal/gcfloor":     {Internal, 0},
	"internal/fakecuda":    {Internal, 0},
	"internal/fifotest":    {Internal, 0},
	"internal/layers":      {Internal, 0},
	"internal/outfile":     {Internal, 0},
	"internal/testsummary": {Internal, 0},

	"trace": {Trace, 0},

	"allocator/config":            {Allocator, 0},
	"allocator/placement":         {Allocator, 0},
	"allocator":                   {Allocator, 1},
	"allocator/cuda":              {Allocator, 2},
	"allocator/internal/scenario": {Allocator, 2},

	"sim/gpu":                        {Sim, 0},
	"sim/trial":                      {Sim, 1},
	"sim/replay":                     {Sim, 1},
	"sim/workers":                    {Sim, 1},
	"sim/replay/realgpu":             {Sim, 2},
	"sim/replay/speculate":           {Sim, 2},
	"sim/replay/internal/replaytest": {Sim, 2},
	"sim/packing":                    {Sim, 2},
	"sim/estimate":                   {Sim, 2},
	"sim/demo":                       {Sim, 2},
	"sim/par":                        {Sim, 3},
	"sim/study":                      {Sim, 3},

	"profiler":        {Profiler, 0},
	"profiler/report": {Profiler, 1},

	"cmd/memreplay":    {Cmd, 0},
	"cmd/libmemreplay": {Cmd, 0},
	// bench/growth.sh's plots and page timing (it drives profiler/report).
	"bench/plot": {Cmd, 0},
	// docs/performance.md's annotated big snapshot.
	"bench/annotate": {Cmd, 0},
}

// Allowed reports whether a package at from may import one at to.
func Allowed(from, to Place) bool {
	if from.Layer != to.Layer {
		return to.Layer < from.Layer
	}
	return to.Step < from.Step
}

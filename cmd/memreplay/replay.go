package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/profiler"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/sim/replay/realgpu"
	"github.com/memreplay/memreplay/sim/replay/speculate"
	"github.com/memreplay/memreplay/trace"
)

const replayHelp = `Usage: memreplay replay [flags] TRACE...

Replays a recorded allocation trace through the PyTorch-exact caching
allocator on a simulated GPU and reports where the memory went: peak live
and reserved bytes, waste, fragmentation, retries, OOMs and the allocation
sites that held or stranded the most memory.

TRACE is a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot), an
RMM logging_resource_adaptor CSV log, or a memreplay trace (see
'memreplay convert'). A snapshot recorded after the model was loaded is
replayed from a reconstructed initial state; the report says so. Several
traces are replayed one after another, each with its own report (with
--format json, one JSON object per trace, one after another); the exit
code is 1 if any check failed.

--record OUT writes what memreplay's allocator did during the replay as a
trace of its own: every alloc, free, segment and oom with the replay's
addresses, the trace's stacks, and the end state. OUT ending in .pickle or
.pkl is a PyTorch memory snapshot for pytorch.org/memory_viz (whose
Allocator State History needs the end state that generated trial traces
and RMM logs lack, and which can now show another setting's layout);
anything else is a memreplay trace, written as the replay goes. Replaying
the recording with the same settings reproduces it decision for decision
('replay --check OUT'). See "Recording the replay" in docs/replay.md.

--device cuda[:N] replays on the real GPU N (default 0) instead of the
simulated one: the allocator's cudaMalloc, cudaFree and VMM calls go to the
CUDA driver (libcuda.so.1, or the library MEMREPLAY_LIBCUDA names), the GPU
says when it is full, and the report shows the calls' measured time instead
of the simulator's modelled time. Nothing is computed on the GPU; the
trace's streams are not the driver's, and the trace still says when each
stream's work finished. --capacity then limits the replay to that much of
the GPU (at most all of it); without it the replay has the GPU's memory.
--check compares decisions as on the simulator; a trace recorded with
expandable_segments:True or per_process_memory_fraction needs --capacity
set to the recording GPU's memory, since both scale with the device's.
Everything the replay allocated is freed at the end. See "On a real GPU"
in docs/replay.md.

--policy NAME replays under another allocator policy than PyTorch's
(pytorch, the default, decides exactly as PyTorch does): stitch maps the
free pages of several blocks behind one new range when no free block is
large enough (it turns expandable segments on), lifetime keeps blocks it
predicts long-lived (weights, optimizer state) in pools of their own. On a
trace recorded after the model was loaded, another policy places the
blocks live before the first event itself, largest first, instead of
rebuilding PyTorch's recorded segments. See "Policies" in
docs/allocator.md.

--expect-stats FILE compares the replay's statistics at the end of the
trace with torch.cuda.memory_stats() that the recording process saved as
JSON (json.dump(torch.cuda.memory_stats(), f) right before
_dump_snapshot); it implies --check. Keys the trace determines must match
(exit 1 otherwise);
keys PyTorch's trace leaves to inference (num_alloc_retries,
num_sync_all_streams, transient inactive splits) are shown without
failing; a partial trace determines only the current values. See
"Checking against memory_stats()" in docs/replay.md.

Examples:
  memreplay replay snapshot.pickle
  memreplay replay --check snapshot.pickle          # every decision as PyTorch made it?
  memreplay replay --check --format json *.pickle   # several traces, one JSON object each
  memreplay replay --alloc-conf expandable_segments:True snapshot.pickle
  memreplay replay --policy stitch snapshot.pickle   # what GMLake's stitching would have reserved
  memreplay replay --capacity 24GiB --oom drop-trial --format json trace.mrt
  memreplay replay --pprof mem.pb.gz snapshot.pickle && go tool pprof -unit=auto -top mem.pb.gz
  memreplay replay --html report.html snapshot.pickle  # timeline, segment map, sites
  memreplay replay --alloc-conf expandable_segments:True --record es.pickle snapshot.pickle   # open es.pickle in pytorch.org/memory_viz
  memreplay replay --record trial.pickle trial.mrt   # a trial trace with its end state, for memory_viz
  memreplay replay --alloc-conf max_split_size_mb:128 --record ms.mrt trace.mrt && memreplay replay --check ms.mrt
  memreplay replay --expect-stats trial.stats.json trial.pickle   # decisions and PyTorch's own memory_stats()
  memreplay replay --device cuda --check snapshot.pickle     # the same decisions on the real GPU 0
  MEMREPLAY_LIBCUDA=/usr/lib64/libcuda.so.1 memreplay replay --device cuda:1 --capacity 24GiB --format json trace.mrt

Flags:
`

// replayFlags are the flags replay and compare share.
type replayFlags struct {
	capacity string
	oom      string
	lenient  bool
	format   string
	top      int
	progress bool
	html     string // --html: also write the HTML report there
	record   string // --record (replay only): also record the replay there
	noColor  bool   // --no-color: accepted; the tables have no colour
	device   string // --device: sim (or ""), cuda, cuda:N
	// samples is the profiler's timeline length (0: its default); the
	// HTML report asks for more, to zoom into, and for every event around
	// the peak (detail events; 0: none).
	samples, detail int
}

func (f *replayFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.capacity, "capacity", "", "device memory, e.g. 24GiB or rtx-24gb (default: the trace's; else implied by its OOMs, except under --check; else not limited)")
	fs.StringVar(&f.oom, "oom", "stop", "on an OOM the recording did not have: stop, skip (the allocation and its frees) or drop-trial")
	fs.BoolVar(&f.lenient, "lenient", false, "count and skip bad events (free of an unknown address, double free, a device out of range) instead of failing")
	fs.StringVar(&f.format, "format", "table", "output: table, json or markdown")
	fs.IntVar(&f.top, "top", 10, "allocation sites to list (0: all of them)")
	fs.BoolVar(&f.progress, "progress", true, "show progress on stderr when it is a terminal")
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML report (timeline, segment map, sites) to this file")
	fs.BoolVar(&f.noColor, "no-color", false, "plain output (the tables are plain already; accepted for scripts)")
	fs.StringVar(&f.device, "device", "sim", "where to replay: sim (the simulated GPU) or cuda[:N] (the real GPU N through the CUDA driver; MEMREPLAY_LIBCUDA names the driver library)")
}

// sites is --top as report.Input.Top: 0 lists every site.
func (f *replayFlags) sites() int {
	if f.top == 0 {
		return math.MaxInt
	}
	return f.top
}

// gpu parses --device: nil for the simulated GPU, else the real GPU's
// options.
func (f *replayFlags) gpu(capacity uint64) (*realgpu.Options, error) {
	switch d := f.device; {
	case d == "" || d == "sim":
		return nil, nil
	case d == "cuda":
		return &realgpu.Options{Capacity: capacity}, nil
	case strings.HasPrefix(d, "cuda:"):
		n, err := strconv.Atoi(d[len("cuda:"):])
		if err != nil || n < 0 {
			return nil, usageError{fmt.Errorf("--device %q: want sim, cuda or cuda:N with N a GPU's number", d)}
		}
		return &realgpu.Options{Ordinal: n, Capacity: capacity}, nil
	}
	return nil, usageError{fmt.Errorf("--device %q: want sim, cuda or cuda:N", f.device)}
}

func (f *replayFlags) options(path string) (replay.Options, error) {
	opts := replay.Options{Name: path, Lenient: f.lenient}
	if f.capacity != "" {
		c, err := parseCapacity(f.capacity)
		if err != nil {
			return opts, usageError{fmt.Errorf("--capacity: %v", err)}
		}
		opts.Capacity = c
	}
	if f.top < 0 {
		return opts, usageError{fmt.Errorf("--top %d: want a number of sites (0: all of them)", f.top)}
	}
	p, err := replay.ParseOOMPolicy(f.oom)
	if err != nil {
		return opts, usageError{fmt.Errorf("--oom: %v", err)}
	}
	opts.OOM = p
	if f.html != "" {
		f.samples, f.detail = report.HTMLTimelineSamples, report.HTMLDetailEvents
	}
	if err := checkFormat(f.format); err != nil {
		return opts, err
	}
	if _, err := f.gpu(0); err != nil {
		return opts, err
	}
	return opts, nil
}

func replayCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", replayHelp, stderr)
	var rf replayFlags
	rf.register(fs)
	allocConf := fs.String("alloc-conf", "", "replay under these PYTORCH_CUDA_ALLOC_CONF settings instead of the trace's own")
	policyName := fs.String("policy", "pytorch", policyUsage)
	check := fs.Bool("check", false, "compare every decision with the recording's; exit 1 on any divergence")
	pprofOut := fs.String("pprof", "", "write a pprof profile (gzipped protobuf) to this file")
	failOnOOM := fs.Bool("fail-on-oom", false, "exit 1 when the replay runs out of memory")
	expectStats := fs.String("expect-stats", "", "compare the replay's end statistics with torch.cuda.memory_stats() saved as JSON by the recording process; exit 1 when a key the trace determines differs")
	statsDevice := fs.Int("expect-stats-device", -1, "the traced device whose memory_stats() --expect-stats holds (default: the trace's only device)")
	fs.StringVar(&rf.record, "record", "", "also write the replay's own activity as a trace to this file (.pickle/.pkl: a PyTorch snapshot for pytorch.org/memory_viz; else memreplay's format)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() == 0 {
		return usageError{fmt.Errorf("want a trace file (see memreplay help replay)")}
	}
	if fs.NArg() > 1 {
		for _, f := range []struct{ name, v string }{{"pprof", *pprofOut}, {"html", rf.html}, {"record", rf.record},
			{"expect-stats", *expectStats}} {
			if f.v != "" {
				return usageError{fmt.Errorf("--%s takes one trace, got %d (memreplay report writes one page for several)", f.name, fs.NArg())}
			}
		}
	}
	// --expect-stats implies --check: the statistics are comparable only
	// when the replay fails where the recording failed (a retry's failed
	// cudaMalloc leaves no oom entry; check mode replays it from the
	// recorded releases), and a divergence explains a difference.
	run := replayRun{rf: &rf, allocConf: *allocConf, confGiven: fs.Changed("alloc-conf"), check: *check || *expectStats != "",
		failOnOOM: *failOnOOM, pprofOut: *pprofOut}
	if fs.Changed("policy") {
		p, err := parsePolicy(*policyName)
		if err != nil {
			return err
		}
		run.policy = p
	}
	for _, o := range []struct{ flag, path string }{{"--pprof", *pprofOut}, {"--html", rf.html}} {
		if o.path != "" {
			if err := canWrite(o.flag, o.path); err != nil {
				return err
			}
		}
	}
	if *expectStats != "" {
		ms, err := readMemoryStats(*expectStats, *statsDevice)
		if err != nil {
			return err
		}
		run.expectStats = ms
	} else if fs.Changed("expect-stats-device") {
		return usageError{fmt.Errorf("--expect-stats-device needs --expect-stats")}
	}
	failed := false
	for i, path := range fs.Args() {
		if i > 0 && rf.format != "json" {
			fmt.Fprintln(stdout)
		}
		ok, err := run.one(path, stdout, stderr)
		if err != nil {
			return err
		}
		failed = failed || !ok
	}
	if failed {
		return errCheckFailed
	}
	return nil
}

// replayRun is the replay command's flags, for each of its traces.
type replayRun struct {
	rf                          *replayFlags
	allocConf                   string
	confGiven, check, failOnOOM bool
	pprofOut                    string
	expectStats                 *replay.MemoryStats // --expect-stats
	policy                      allocator.Policy    // --policy; nil: PyTorch's
}

// one replays one trace and writes its reports; ok is false when its check
// failed (or, with --fail-on-oom, it ran out of memory), which the command
// turns into exit 1 after the last trace.
func (run *replayRun) one(path string, stdout, stderr io.Writer) (ok bool, err error) {
	rf := run.rf
	opts, err := rf.options(path)
	if err != nil {
		return false, err
	}
	opts.Check = run.check
	opts.ExpectStats = run.expectStats
	opts.Policy = run.policy
	if run.confGiven {
		if opts.Config, err = parseAllocConf(run.allocConf); err != nil {
			return false, err
		}
	}
	in, err := replayOnce(path, opts, rf, stderr)
	if err != nil {
		return false, err
	}
	in.Top = rf.sites()
	namedTrace(in, path)
	if err := writeReport(stdout, rf.format, in); err != nil {
		return false, err
	}
	if run.pprofOut != "" {
		if err := writePprof(run.pprofOut, in); err != nil {
			return false, err
		}
	}
	if rf.html != "" {
		if err := writeHTML(rf.html, &report.HTMLReport{Runs: []report.HTMLRun{{Label: runLabel(in), Input: in}}}); err != nil {
			return false, err
		}
	}
	res := in.Result
	if res.Check != nil && res.Check.NothingToCheck {
		fmt.Fprintf(stderr, "memreplay replay: %s: %s\n", path, replay.NothingToCheckMessage)
	} else if res.Check != nil && !res.Check.Passed() {
		if d := res.Check.FirstDivergence; d != nil {
			fmt.Fprintf(stderr, "memreplay replay: %s: check failed: %d of %d decisions matched; first divergence at %s\n",
				path, res.Check.DecisionsMatched, res.Check.DecisionsExpected, d)
		} else {
			fmt.Fprintf(stderr, "memreplay replay: %s: check failed: final layout differs: %s\n", path, res.Check.FinalDifference)
		}
		if c := res.Config; rf.device != "sim" && opts.Capacity == 0 && (c.ExpandableSegments || c.PerProcessMemoryFraction < 1) {
			fmt.Fprintln(stderr, "memreplay replay: (on a GPU, expandable segments and per_process_memory_fraction scale with its memory: "+
				"--capacity with the recording GPU's memory replays the trace as recorded)")
		}
		return false, nil
	}
	if sc := res.StatsCheck; sc != nil && !sc.Passed() {
		fmt.Fprintf(stderr, "memreplay replay: %s: memory_stats() check failed: %d of %d keys the trace determines match those in %s\n",
			path, sc.ExactMatched, sc.Exact, sc.File)
		return false, nil
	}
	if run.failOnOOM && len(res.OOMs) > 0 {
		fmt.Fprintf(stderr, "memreplay replay: %s: out of memory at event %d: %s\n", path, res.OOMs[0].Index, firstLine(res.OOMs[0].Message))
		return false, nil
	}
	return true, nil
}

// readMemoryStats reads --expect-stats FILE for device dev (-1: the
// trace's only one).
func readMemoryStats(path string, dev int) (*replay.MemoryStats, error) {
	if dev < -1 || dev > 1<<16 {
		return nil, usageError{fmt.Errorf("--expect-stats-device %d: want a device number", dev)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--expect-stats: %v", err)}
	}
	defer f.Close()
	ms, err := replay.ReadMemoryStats(f, path)
	if err != nil {
		return nil, err
	}
	ms.Device = int32(dev)
	return ms, nil
}

// replayOnce opens and replays one trace with the profiler attached. A
// large snapshot pickle replayed on the simulated GPU is replayed while it
// is imported (speculate.OpenReplay), and so is its recording as a pickle
// (--record OUT.pickle): the recorder spools the events and writes the
// file at its Finish, which runs here, after OpenReplay, for the replay
// it kept; a discarded replay's recording is dropped, spool and temporary
// file. A native recording writes each stack's frames as it goes, which
// the speculative replay has only at the end of the import, and a real
// GPU wants the replay once: they replay after the import, and so does
// --lenient: a trace that begins mid-run would be replayed to its end
// under the wrong guess (its bad frees counted, not stopping it) before
// being replayed again.
func replayOnce(path string, opts replay.Options, rf *replayFlags, stderr io.Writer) (*report.Input, error) {
	if (rf.record != "" && !isPickleName(rf.record)) || (rf.device != "" && rf.device != "sim") || rf.lenient {
		lastSpeculation = speculate.NotSpeculated
		return replayAfterOpen(path, opts, rf, stderr)
	}
	label := replayLabel(path, opts, nil)
	// Every recording started, the kept one's and a discarded one's: all
	// but the kept one are dropped (abort after finish does nothing).
	var recs []*recording
	defer func() {
		for _, rec := range recs {
			rec.abort()
		}
	}()
	type kept struct {
		prof *profiler.Profiler
		rec  *recording
	}
	o, res, k, how, err := speculate.OpenReplay(path, opts, func(r trace.Reader, total int64, bounds *speculate.EventBounds) (*replay.Result, kept, error) {
		opts := opts
		// A second call replays again: the first replay was discarded,
		// its recording is dropped now (its spool is on disk).
		for _, rec := range recs {
			rec.abort()
		}
		recs = recs[:0]
		var rec *recording
		if rf.record != "" {
			var err error
			if rec, err = startRecording(rf.record, path, r, opts, rf.device); err != nil {
				return nil, kept{}, err
			}
			recs = append(recs, rec)
		}
		pr := newProgress(stderr, label, total, rf.progress)
		pr.totalFrom(bounds)
		opts.Progress = pr.update
		prof := newProfiler(r, total, bounds, rf)
		opts.Recorder = prof
		if rec != nil {
			opts.Recorder = replay.Recorders(prof, rec.rr)
		}
		res, err := replay.Run(r, opts)
		pr.done()
		return res, kept{prof, rec}, err
	})
	lastSpeculation = how
	if o == nil {
		return nil, openError(err)
	}
	defer o.Close()
	if err != nil {
		return nil, err
	}
	if k.rec != nil {
		if err := k.rec.finish(stderr); err != nil {
			return nil, err
		}
	}
	prof := k.prof
	// A confirmed speculative replay's reader had no annotations while it
	// ran (they come with the import): hand them over. After any other
	// replay Run has, and this gives the same list again.
	prof.Annotations(o.Annotations())
	return &report.Input{Trace: o.Reader.Header(), Result: res, Profile: prof.Finish(), Stacks: o.Reader.Stacks()}, nil
}

// lastSpeculation is how the last replayOnce replayed its trace (for the
// tests).
var lastSpeculation speculate.Outcome

// replayLabel is the progress line's label.
func replayLabel(path string, opts replay.Options, gpu *realgpu.Backend) string {
	label := "replaying " + path
	if opts.Config != nil {
		label += " under " + opts.Config.String()
	}
	if opts.Policy != nil {
		label += " with policy " + opts.Policy.Name()
	}
	if gpu != nil {
		label += " on " + gpu.Name()
	}
	return label
}

// newProfiler is the profiler of a replay of r, total events long, or of
// a length within bounds (when not nil: replayed while it is imported,
// the length is known at the end).
func newProfiler(r trace.Reader, total int64, bounds *speculate.EventBounds, rf *replayFlags) *profiler.Profiler {
	opts := profiler.Options{ExpectedEvents: total, MaxSamples: rf.samples, DetailEvents: rf.detail}
	if bounds != nil {
		opts.EventBounds = bounds
	}
	return profiler.New(r.Stacks(), opts)
}

// replayAfterOpen is replayOnce after the import: with a native --record,
// --lenient or on a real GPU.
func replayAfterOpen(path string, opts replay.Options, rf *replayFlags, stderr io.Writer) (*report.Input, error) {
	o, err := openTrace(path)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	var total int64
	if o.Trace != nil {
		total = int64(len(o.Trace.Events))
	} else if o.Packed != nil {
		total = o.Packed.Events.Len()
	}
	var rec *recording
	if rf.record != "" {
		if rec, err = startRecording(rf.record, path, o.Reader, opts, rf.device); err != nil {
			return nil, err
		}
		defer rec.abort()
	}
	gpu, err := openGPU(rf, opts.Capacity)
	if err != nil {
		return nil, err
	}
	if gpu != nil {
		// After the profile and the recording were read: Close frees
		// everything the replay left on the GPU.
		defer gpu.Close()
		opts.NewProcess = gpu.NewProcess
	}
	pr := newProgress(stderr, replayLabel(path, opts, gpu), total, rf.progress)
	opts.Progress = pr.update
	prof := newProfiler(o.Reader, total, nil, rf)
	opts.Recorder = prof
	if rec != nil {
		opts.Recorder = replay.Recorders(prof, rec.rr)
	}
	res, err := replay.Run(o.Reader, opts)
	pr.done()
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if err := rec.finish(stderr); err != nil {
			return nil, err
		}
	}
	// The annotations reached prof from Run (replay.AnnotationRecorder).
	in := &report.Input{Trace: o.Reader.Header(), Result: res, Profile: prof.Finish(), Stacks: o.Reader.Stacks()}
	if gpu != nil {
		if err := gpu.Close(); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// openGPU opens the real GPU --device names, nil for the simulated one. No
// driver, no GPU, or a --capacity larger than the GPU is one line, exit
// code 2.
func openGPU(rf *replayFlags, capacity uint64) (*realgpu.Backend, error) {
	o, err := rf.gpu(capacity)
	if err != nil || o == nil {
		return nil, err
	}
	b, err := realgpu.Open(*o)
	if errors.Is(err, realgpu.ErrCapacity) {
		return nil, usageError{fmt.Errorf("--capacity: %v", err)}
	}
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w", rf.device, err)
	}
	return b, nil
}

// recording is --record OUT: the replay's own activity, written into a
// temporary file beside OUT that replaces OUT once complete, so that a
// failure (or a replay that ends in error) leaves no partial file. The file
// is created before the replay, so that an unwritable OUT fails at once. A
// memreplay trace streams as the replay goes; a pickle puts the end state
// before the entries, so its entries are spooled to disk beside OUT as the
// replay goes (a few bytes each; the spool file is unlinked at once) and
// the pickle is written at the end.
type recording struct {
	out    string
	pickle bool
	f      *outFile
	bw     *bufio.Writer
	rr     *replay.ReplayRecorder
}

func startRecording(out, path string, src trace.Reader, opts replay.Options, device string) (*recording, error) {
	if abs1, _ := filepath.Abs(path); abs1 != "" {
		if abs2, _ := filepath.Abs(out); abs1 == abs2 {
			return nil, usageError{fmt.Errorf("--record %s: that is the trace being replayed", out)}
		}
	}
	f, err := createOutFor("--record", out)
	if err != nil {
		return nil, err
	}
	r := &recording{out: out, pickle: isPickleName(out), f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	ro := replay.ReplayRecordOptions{Name: path}
	var flags []string
	if opts.Capacity > 0 {
		flags = append(flags, "--capacity "+allocator.FormatSize(opts.Capacity))
	}
	if opts.OOM != replay.OOMStop {
		flags = append(flags, "--oom "+opts.OOM.String())
	}
	if opts.Policy != nil {
		flags = append(flags, "--policy "+opts.Policy.Name())
	}
	if device != "" && device != "sim" {
		flags = append(flags, "--device "+device)
	}
	if len(flags) > 0 {
		ro.Notes = append(ro.Notes, "replayed with "+strings.Join(flags, " "))
	}
	if r.pickle {
		if r.rr, err = replay.NewReplayRecorderPyTorch(r.bw, spoolDir(out), src, ro); err != nil {
			f.abort()
			return nil, fmt.Errorf("--record %s: %w", out, err)
		}
	} else {
		r.rr = replay.NewReplayRecorderTo(r.bw, src, ro)
	}
	return r, nil
}

// finish writes the end state (and the pickle), then renames the file
// over OUT.
func (r *recording) finish(stderr io.Writer) error {
	err := r.rr.Finish()
	if err == nil {
		err = r.bw.Flush()
	}
	if err == nil {
		err = r.f.commit()
	}
	if err != nil {
		r.f.abort()
		r.f = nil
		return fmt.Errorf("--record %s: %w", r.out, err)
	}
	r.f = nil
	what := "memreplay trace"
	if r.pickle {
		what = "PyTorch snapshot (open it in pytorch.org/memory_viz)"
	}
	fmt.Fprintf(stderr, "memreplay replay: recorded the replay in %s: %s, %s, end state of %s\n",
		r.out, what, plural(int(r.rr.Events()), "event"), plural(len(r.rr.Final()), "segment"))
	return nil
}

// abort removes the temporary file of a recording not finished.
func (r *recording) abort() {
	r.rr.Close()
	if r.f != nil {
		r.f.abort()
		r.f = nil
	}
}

// spoolDir is where a pickle's entries are spooled while out is written:
// beside out, on its file system, when out is (or will be) a regular file;
// the system's temporary directory when out is a device or a FIFO
// (/dev/full, /dev/stdout).
func spoolDir(out string) string {
	if st, err := os.Stat(out); err == nil && !st.Mode().IsRegular() {
		return ""
	}
	return filepath.Dir(out)
}

func writeReport(w io.Writer, format string, in *report.Input) error {
	switch format {
	case "json":
		return report.WriteJSON(w, in)
	case "markdown":
		return report.WriteMarkdown(w, in)
	default:
		return report.WriteTable(w, in)
	}
}

func writePprof(path string, in *report.Input) error {
	f, err := createOut(path)
	if err != nil {
		return inputError{fmt.Errorf("cannot write %s: %w", path, err)}
	}
	defer f.abort()
	if err := report.WritePprof(f, in); err != nil {
		return err
	}
	return f.commit()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// flagError turns a pflag parse error into a usage error (help is not an
// error).
func flagError(err error) error {
	if err == pflag.ErrHelp {
		return err
	}
	return usageError{err}
}

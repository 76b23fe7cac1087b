package allocator_test

// Scenario tests: each file in testdata/scenarios is a list of commands run
// against one allocator on a simulated GPU, with the trace entries each
// command caused and the resulting layout and statistics written beside it.
// Invariant checks run after every operation. The commands:
//
//	init capacity=SIZE [context=SIZE] [granularity=SIZE] [conf=STRING] [dialect=old]
//	malloc NAME SIZE [stream=N]     allocate; prints the decisions and the block
//	free NAME                       free request (and completion, unless pending)
//	record_stream NAME stream=N
//	complete stream=N | complete all    let the simulated events finish
//	process_events | empty_cache
//	fraction F                      set_per_process_memory_fraction
//	conf STRING                     _set_allocator_settings (re-parse)
//	fail_malloc N | fail_map N      make the Nth cudaMalloc / cuMemCreate fail
//	sticky NAME                     a sticky device error from now on
//	reset_peak | reset_accumulated  reset_peak_memory_stats / reset_accumulated_memory_stats
//	layout                          the snapshot: segments and blocks
//	stats [KEY...]                  memory_stats: the named flattened keys, or every
//	                                non-zero statistic as current/peak/allocated/freed
//	device                          the simulated device's memory and call counts
//
// SIZE is bytes with an optional unit (B, KiB, MiB, GiB) and may be
// fractional ("1.5MiB"). Sizes print exactly, in the largest unit that
// divides them.

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/internal/datadriven"
	"github.com/memreplay/memreplay/sim"
)

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := &scenario{}
			datadriven.Walk(t, f, s.run)
		})
	}
}

type scenario struct {
	gpu   *sim.GPU
	proc  *sim.Process
	alloc *allocator.Allocator
	cfg   config.Config
	names map[string]*allocator.Block
	addrs map[uint64]string // allocated block address -> name
	log   []allocator.TraceEntry
}

func (s *scenario) run(t *testing.T, c *datadriven.Case) string {
	if c.Cmd != "init" && s.alloc == nil {
		c.Fatalf(t, "the first command must be init")
	}
	s.log = s.log[:0]
	var out string
	switch c.Cmd {
	case "init":
		out = s.init(t, c)
	case "malloc":
		out = s.malloc(t, c)
	case "free":
		b := s.block(t, c)
		if err := s.alloc.Free(b); err != nil {
			out = "error: " + err.Error()
		} else {
			delete(s.names, s.word(t, c, 0))
			delete(s.addrs, b.Addr())
		}
	case "record_stream":
		out = errText(s.alloc.RecordStream(s.block(t, c), allocator.Stream(s.uintArg(t, c, "stream"))))
	case "complete":
		if c.Has("all") {
			s.proc.CompleteAllEvents()
		} else {
			s.proc.CompleteEvents(allocator.Stream(s.uintArg(t, c, "stream")))
		}
	case "process_events":
		out = errText(s.alloc.ProcessEvents())
	case "empty_cache":
		out = errText(s.alloc.EmptyCache())
	case "fraction":
		f, err := strconv.ParseFloat(s.word(t, c, 0), 64)
		if err != nil {
			c.Fatalf(t, "%v", err)
		}
		out = errText(s.alloc.SetMemoryFraction(f))
	case "conf":
		if err := s.cfg.Apply(c.ArgString()); err != nil {
			out = "error: " + err.Error()
		} else {
			out = errText(s.alloc.SetConfig(s.cfg))
		}
	case "fail_malloc":
		s.proc.FailMalloc(int(s.wordUint(t, c, 0)))
	case "fail_map":
		s.proc.FailCreatePage(int(s.wordUint(t, c, 0)))
	case "sticky":
		s.proc.InjectStickyError(s.word(t, c, 0))
	case "reset_peak":
		s.alloc.ResetPeakStats()
	case "reset_accumulated":
		s.alloc.ResetAccumulatedStats()
	case "layout":
		out = s.layout()
	case "stats":
		out = s.stats(c)
	case "device":
		out = s.device()
	default:
		c.Fatalf(t, "unknown command")
	}
	return s.trace() + out
}

func (s *scenario) init(t *testing.T, c *datadriven.Case) string {
	opts := sim.Options{Capacity: s.sizeArg(t, c, "capacity", 0), NoContextOverhead: true}
	if v, ok := c.Get("context"); ok {
		opts.ContextOverhead = mustSize(t, c, v)
		opts.NoContextOverhead = opts.ContextOverhead == 0
	}
	opts.Granularity = s.sizeArg(t, c, "granularity", 0)
	gpu, err := sim.NewGPU(opts)
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	proc, err := gpu.NewProcess()
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	s.cfg = config.Default()
	if v, ok := c.Get("dialect"); ok && v == "old" {
		s.cfg.Dialect = config.DialectOld
	}
	if v, ok := c.Get("conf"); ok {
		if err := s.cfg.Apply(v); err != nil {
			return "error: " + err.Error()
		}
	}
	a, err := allocator.New(proc, s.cfg, allocator.WithInvariantChecks())
	if err != nil {
		return "error: " + err.Error()
	}
	s.gpu, s.proc, s.alloc = gpu, proc, a
	s.names = map[string]*allocator.Block{}
	s.addrs = map[uint64]string{}
	a.AddObserver(func(e allocator.TraceEntry) { s.log = append(s.log, e) })
	return ""
}

func (s *scenario) malloc(t *testing.T, c *datadriven.Case) string {
	name := s.word(t, c, 0)
	size := mustSize(t, c, s.word(t, c, 1))
	stream := allocator.Stream(0)
	if _, ok := c.Get("stream"); ok {
		stream = allocator.Stream(s.uintArg(t, c, "stream"))
	}
	if _, dup := s.names[name]; dup {
		c.Fatalf(t, "name %q is live", name)
	}
	b, err := s.alloc.Malloc(size, stream)
	if err != nil {
		return "error: " + err.Error()
	}
	if b == nil {
		return name + " = null"
	}
	s.names[name] = b
	s.addrs[b.Addr()] = name
	return fmt.Sprintf("%s = %#x block %s", name, b.Addr(), fmtSize(b.Size()))
}

func (s *scenario) trace() string {
	var b strings.Builder
	for _, e := range s.log {
		switch e.Action {
		case allocator.ActionOOM:
			fmt.Fprintf(&b, "oom %s device_free=%s", fmtSize(e.Size), fmtSize(e.DeviceFree))
		default:
			fmt.Fprintf(&b, "%s %#x %s", e.Action, e.Addr, fmtSize(e.Size))
		}
		if e.Stream != 0 {
			fmt.Fprintf(&b, " stream=%d", e.Stream)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *scenario) layout() string {
	var b strings.Builder
	for _, seg := range s.alloc.Snapshot().Segments {
		kind := ""
		if seg.IsExpandable {
			kind = " expandable"
		}
		stream := ""
		if seg.Stream != 0 {
			stream = fmt.Sprintf(" stream=%d", seg.Stream)
		}
		fmt.Fprintf(&b, "segment %#x %s %s%s%s allocated=%s active=%s\n", seg.Address, seg.SegmentType,
			fmtSize(seg.TotalSize), kind, stream, fmtSize(seg.AllocatedSize), fmtSize(seg.ActiveSize))
		for _, bl := range seg.Blocks {
			fmt.Fprintf(&b, "  +%s %s %s", fmtSize(bl.Address-seg.Address), fmtSize(bl.Size), bl.State)
			if n, ok := s.addrs[bl.Address]; ok && bl.State == allocator.StateActiveAllocated {
				fmt.Fprintf(&b, " %s requested=%s", n, fmtSize(bl.RequestedSize))
			}
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 {
		return "no segments"
	}
	return b.String()
}

// stats prints the named flattened keys, or by default every statistic
// that is not all zero, one line per statistic: current/peak/allocated/freed
// for all pools and for each pool that is not all zero.
func (s *scenario) stats(c *datadriven.Case) string {
	st := s.alloc.Stats()
	var b strings.Builder
	if len(c.Args) > 0 {
		m := st.Map()
		for _, a := range c.Args {
			v, ok := m[a.Key]
			if !ok {
				fmt.Fprintf(&b, "%s: no such key\n", a.Key)
				continue
			}
			fmt.Fprintf(&b, "%s: %d\n", a.Key, v)
		}
		return b.String()
	}
	q := func(x allocator.Stat) string {
		return fmt.Sprintf("%d/%d/%d/%d", x.Current, x.Peak, x.Allocated, x.Freed)
	}
	for _, ar := range st.Arrays() {
		if ar.Array[0] == (allocator.Stat{}) {
			continue
		}
		fmt.Fprintf(&b, "%s all=%s", ar.Name, q(ar.Array[0]))
		for i, pn := range []string{"", "small", "large"} {
			if i > 0 && ar.Array[i] != (allocator.Stat{}) {
				fmt.Fprintf(&b, " %s=%s", pn, q(ar.Array[i]))
			}
		}
		b.WriteByte('\n')
	}
	for _, x := range st.Singles() {
		if *x.Stat != (allocator.Stat{}) {
			fmt.Fprintf(&b, "%s %s\n", x.Name, q(*x.Stat))
		}
	}
	var counters []string
	for _, x := range []struct {
		name string
		v    int64
	}{{"num_alloc_retries", st.NumAllocRetries}, {"num_ooms", st.NumOOMs}, {"num_sync_all_streams", st.NumSyncAllStreams},
		{"num_device_alloc", st.NumDeviceAlloc}, {"num_device_free", st.NumDeviceFree}} {
		if x.v != 0 {
			counters = append(counters, fmt.Sprintf("%s=%d", x.name, x.v))
		}
	}
	if len(counters) > 0 {
		b.WriteString(strings.Join(counters, " ") + "\n")
	}
	if b.Len() == 0 {
		return "all zero"
	}
	return b.String()
}

func (s *scenario) device() string {
	cs := s.proc.Counters()
	var calls []string
	for _, call := range sim.Calls() {
		if n := cs.Get(call).Calls; n > 0 {
			calls = append(calls, fmt.Sprintf("%s=%d", call, n))
		}
	}
	sort.Strings(calls)
	return fmt.Sprintf("used=%s free=%s\ncalls: %s", fmtSize(s.gpu.Used()), fmtSize(s.gpu.Free()), strings.Join(calls, " "))
}

func (s *scenario) block(t *testing.T, c *datadriven.Case) *allocator.Block {
	name := s.word(t, c, 0)
	b, ok := s.names[name]
	if !ok {
		c.Fatalf(t, "no live block %q", name)
	}
	return b
}

func (s *scenario) word(t *testing.T, c *datadriven.Case, i int) string {
	n := 0
	for _, a := range c.Args {
		if !a.HasVal {
			if n == i {
				return a.Key
			}
			n++
		}
	}
	c.Fatalf(t, "missing argument %d", i+1)
	return ""
}

func (s *scenario) wordUint(t *testing.T, c *datadriven.Case, i int) uint64 {
	v, err := strconv.ParseUint(s.word(t, c, i), 10, 64)
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	return v
}

func (s *scenario) uintArg(t *testing.T, c *datadriven.Case, key string) uint64 {
	v, ok := c.Get(key)
	if !ok {
		c.Fatalf(t, "missing %s=", key)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		c.Fatalf(t, "%s: %v", key, err)
	}
	return n
}

func (s *scenario) sizeArg(t *testing.T, c *datadriven.Case, key string, def uint64) uint64 {
	v, ok := c.Get(key)
	if !ok {
		return def
	}
	return mustSize(t, c, v)
}

func errText(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

var units = []struct {
	name string
	n    uint64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func mustSize(t *testing.T, c *datadriven.Case, s string) uint64 {
	n, err := parseSize(s)
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	return n
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.name) {
			s, mult = strings.TrimSuffix(s, u.name), u.n
			break
		}
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	v := f * float64(mult)
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return uint64(v), nil
}

func fmtSize(n uint64) string {
	for _, u := range units {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatUint(n/u.n, 10) + u.name
		}
	}
	return "0B"
}

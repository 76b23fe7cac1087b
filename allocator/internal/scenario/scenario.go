// Package scenario runs the allocator's scenario files
// (allocator/testdata/scenarios) against any device: the simulator in the
// allocator's own tests, the CUDA backend on its fake driver in
// allocator/cuda's. Each file is a list of commands run against one
// allocator, with the trace entries each command caused and the resulting
// layout and statistics written beside it; invariant checks run after
// every operation. The commands:
//
//	init capacity=SIZE [context=SIZE] [granularity=SIZE] [conf=STRING] [dialect=old]
//	malloc NAME SIZE [stream=N]     allocate; prints the decisions and the block
//	free NAME                       free request (and completion, unless pending)
//	record_stream NAME stream=N
//	complete stream=N | complete all    let the device's events finish
//	process_events | empty_cache
//	fraction F                      set_per_process_memory_fraction
//	conf STRING                     _set_allocator_settings (re-parse)
//	fail_malloc N | fail_map N      make the Nth cudaMalloc / cuMemCreate fail
//	sticky NAME                     a sticky device error from now on
//	reset_peak | reset_accumulated  reset_peak_memory_stats / reset_accumulated_memory_stats
//	layout                          the snapshot: segments and blocks
//	stats [KEY...]                  memory_stats: the named flattened keys, or every
//	                                non-zero statistic as current/peak/allocated/freed
//	device                          the device's memory and call counts
//
// SIZE is bytes with an optional unit (B, KiB, MiB, GiB) and may be
// fractional ("1.5MiB"). Sizes print exactly, in the largest unit that
// divides them.
//
// The expected outputs are written in the simulator's terms (its address
// base, its call and error names); a Harness for another device translates
// its output into them (Harness.Output, Harness.ErrText).
package scenario

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/internal/datadriven"
)

// Harness is the device under test and its controls.
type Harness interface {
	// Init makes a new, empty device of capacity bytes; granularity 0
	// means the device's default, context the per-process overhead
	// charged at once (0: none). It is called for every init command, and
	// replaces the previous device.
	Init(capacity, granularity, context uint64) (allocator.Device, error)
	// CompleteStream and CompleteAll let recorded events finish, as the
	// stream (or all streams) catching up would.
	CompleteStream(s allocator.Stream)
	CompleteAll()
	// FailMalloc and FailCreatePage make the nth cudaMalloc / cuMemCreate
	// from now fail with out of memory, once.
	FailMalloc(n int)
	FailCreatePage(n int)
	// Sticky corrupts the context with the named sticky error (either the
	// runtime or the driver spelling); it reports false for a name it does
	// not know.
	Sticky(name string) bool
	// Device is the device command's output: "used=SIZE free=SIZE" and a
	// line "calls: NAME=N ..." in the simulator's call names.
	Device() string
	// ErrText renders an error as the simulator's device would have
	// caused it ("error: ..."); Output translates a command's whole output
	// (addresses) into the simulator's terms.
	ErrText(err error) string
	Output(s string) string
	// Close ends the device (at the end of each file).
	Close()
}

// Run runs every scenario file in dir, each as a subtest with a fresh
// harness from newHarness.
func Run(t *testing.T, dir string, newHarness func(t *testing.T) Harness) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario files in %s", dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			h := newHarness(t)
			defer h.Close()
			s := &scenario{h: h}
			datadriven.Walk(t, f, s.run)
		})
	}
}

type scenario struct {
	h     Harness
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
			out = s.h.ErrText(err)
		} else {
			delete(s.names, Word(t, c, 0))
			delete(s.addrs, b.Addr())
		}
	case "record_stream":
		out = s.errText(s.alloc.RecordStream(s.block(t, c), allocator.Stream(uintArg(t, c, "stream"))))
	case "complete":
		if c.Has("all") {
			s.h.CompleteAll()
		} else {
			s.h.CompleteStream(allocator.Stream(uintArg(t, c, "stream")))
		}
	case "process_events":
		out = s.errText(s.alloc.ProcessEvents())
	case "empty_cache":
		out = s.errText(s.alloc.EmptyCache())
	case "fraction":
		f, err := strconv.ParseFloat(Word(t, c, 0), 64)
		if err != nil {
			c.Fatalf(t, "%v", err)
		}
		out = s.errText(s.alloc.SetMemoryFraction(f))
	case "conf":
		if err := s.cfg.Apply(c.ArgString()); err != nil {
			out = "error: " + err.Error()
		} else {
			out = s.errText(s.alloc.SetConfig(s.cfg))
		}
	case "fail_malloc":
		s.h.FailMalloc(int(wordUint(t, c, 0)))
	case "fail_map":
		s.h.FailCreatePage(int(wordUint(t, c, 0)))
	case "sticky":
		if !s.h.Sticky(Word(t, c, 0)) {
			c.Fatalf(t, "unknown sticky error %q", Word(t, c, 0))
		}
	case "reset_peak":
		s.alloc.ResetPeakStats()
	case "reset_accumulated":
		s.alloc.ResetAccumulatedStats()
	case "layout":
		out = s.layout()
	case "stats":
		out = s.stats(c)
	case "device":
		out = s.h.Device()
	default:
		c.Fatalf(t, "unknown command")
	}
	return s.h.Output(s.trace() + out)
}

func (s *scenario) errText(err error) string {
	if err == nil {
		return ""
	}
	return s.h.ErrText(err)
}

func (s *scenario) init(t *testing.T, c *datadriven.Case) string {
	var ctx uint64
	if v, ok := c.Get("context"); ok {
		ctx = MustSize(t, c, v)
	}
	dev, err := s.h.Init(sizeArg(t, c, "capacity", 0), sizeArg(t, c, "granularity", 0), ctx)
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
	a, err := allocator.New(dev, s.cfg, allocator.WithInvariantChecks())
	if err != nil {
		return "error: " + err.Error()
	}
	s.alloc = a
	s.names = map[string]*allocator.Block{}
	s.addrs = map[uint64]string{}
	a.AddObserver(func(e allocator.TraceEntry) { s.log = append(s.log, e) })
	return ""
}

func (s *scenario) malloc(t *testing.T, c *datadriven.Case) string {
	name := Word(t, c, 0)
	size := MustSize(t, c, Word(t, c, 1))
	stream := allocator.Stream(0)
	if _, ok := c.Get("stream"); ok {
		stream = allocator.Stream(uintArg(t, c, "stream"))
	}
	if _, dup := s.names[name]; dup {
		c.Fatalf(t, "name %q is live", name)
	}
	b, err := s.alloc.Malloc(size, stream)
	if err != nil {
		return s.errText(err)
	}
	if b == nil {
		return name + " = null"
	}
	s.names[name] = b
	s.addrs[b.Addr()] = name
	return fmt.Sprintf("%s = %#x block %s", name, b.Addr(), FormatSize(b.Size()))
}

func (s *scenario) trace() string {
	var b strings.Builder
	for _, e := range s.log {
		switch e.Action {
		case allocator.ActionOOM:
			fmt.Fprintf(&b, "oom %s device_free=%s", FormatSize(e.Size), FormatSize(e.DeviceFree))
		default:
			fmt.Fprintf(&b, "%s %#x %s", e.Action, e.Addr, FormatSize(e.Size))
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
			FormatSize(seg.TotalSize), kind, stream, FormatSize(seg.AllocatedSize), FormatSize(seg.ActiveSize))
		for _, bl := range seg.Blocks {
			fmt.Fprintf(&b, "  +%s %s %s", FormatSize(bl.Address-seg.Address), FormatSize(bl.Size), bl.State)
			if n, ok := s.addrs[bl.Address]; ok && bl.State == allocator.StateActiveAllocated {
				fmt.Fprintf(&b, " %s requested=%s", n, FormatSize(bl.RequestedSize))
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

func (s *scenario) block(t *testing.T, c *datadriven.Case) *allocator.Block {
	name := Word(t, c, 0)
	b, ok := s.names[name]
	if !ok {
		c.Fatalf(t, "no live block %q", name)
	}
	return b
}

// Word returns the case's ith bare argument.
func Word(t *testing.T, c *datadriven.Case, i int) string {
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

func wordUint(t *testing.T, c *datadriven.Case, i int) uint64 {
	v, err := strconv.ParseUint(Word(t, c, i), 10, 64)
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	return v
}

func uintArg(t *testing.T, c *datadriven.Case, key string) uint64 {
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

func sizeArg(t *testing.T, c *datadriven.Case, key string, def uint64) uint64 {
	v, ok := c.Get(key)
	if !ok {
		return def
	}
	return MustSize(t, c, v)
}

var units = []struct {
	name string
	n    uint64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// MustSize parses a SIZE argument, failing the test on a bad one.
func MustSize(t *testing.T, c *datadriven.Case, s string) uint64 {
	n, err := ParseSize(s)
	if err != nil {
		c.Fatalf(t, "%v", err)
	}
	return n
}

// ParseSize parses bytes with an optional unit, possibly fractional.
func ParseSize(s string) (uint64, error) {
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

// FormatSize prints n exactly, in the largest unit that divides it.
func FormatSize(n uint64) string {
	for _, u := range units {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatUint(n/u.n, 10) + u.name
		}
	}
	return "0B"
}

package report

// The page's data document, written by hand.
//
// The document (htmlData, html_data.go) was json.Marshal's output: a fifth
// of `memreplay report` on a real snapshot went to encoding/json's
// reflection over the timeline's columns, the segment maps and the sites'
// frames, and to the copies of its growing buffer. dataEncoder writes the
// same bytes directly: each type of the document has a method that writes
// its fields in the struct's order under its json tag, with encoding/json's
// rules for every value:
//
//   - strings: HTML-escaped as json.Marshal does (<, > and & as \u003c,
//     \u003e and \u0026; the short escapes \" \\ \b \f \n \r \t; other
//     control bytes as \u00XX; invalid UTF-8 as \ufffd; U+2028 and U+2029
//     escaped);
//   - floats: ES6 style, 'e' form below 1e-6 and from 1e21 up with the
//     exponent's leading zero dropped; NaN and ±Inf fail with the same
//     *json.UnsupportedValueError json.Marshal returns;
//   - nil slices, maps and pointers as null; maps by sorted key;
//     omitempty fields left out when empty.
//
// It is not a json.Marshaler: encoding/json would parse and compact a
// Marshaler's output again, which cost more than it saved. The tests
// compare the two: TestDataEncoderRealSnapshots on every real snapshot's
// page, TestDataEncoderAsMarshal on documents filled at random through
// reflection (so a field added to a type without its line here fails),
// and FuzzDataEncoderStrings on strings and floats of every escape case.
//
// The bytes go to the writer in chunks of about dataChunk from one buffer,
// never as one document: a long trace's is megabytes. Before the first
// byte, finiteData looks for NaN and infinities (the one error json.Marshal
// could return here), so that an error still leaves the writer untouched,
// as json.Marshal's did.

import (
	"encoding/json"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/memreplay/memreplay/profiler"
)

// dataChunk is how many bytes the encoder gathers before writing them.
const dataChunk = 64 << 10

type dataEncoder struct {
	b   []byte
	w   io.Writer
	err error // the first error: a write's or an unsupported float's
	// done holds the encoded form of each long string of an array met so
	// far, at known[s]: a frame is written about ten times in a page (in
	// every site whose stack has it, twice per site).
	done  []byte
	known map[string][2]int
}

// writeData writes d into w as json.Marshal(d) would, or fails as it
// would, before writing anything.
func writeData(w io.Writer, d *htmlData) error {
	if err := finiteData(d); err != nil {
		return err
	}
	e := &dataEncoder{b: make([]byte, 0, dataChunk+dataChunk/8), w: w}
	e.data(d)
	e.flush()
	return e.err
}

func (e *dataEncoder) flush() {
	if e.err == nil && len(e.b) > 0 {
		_, e.err = e.w.Write(e.b)
	}
	e.b = e.b[:0]
}

// more writes out what is gathered once it reaches dataChunk; called
// between the elements of arrays and maps.
func (e *dataEncoder) more() {
	if len(e.b) >= dataChunk {
		e.flush()
	}
}

func (e *dataEncoder) raw(s string) { e.b = append(e.b, s...) }

func (e *dataEncoder) i64(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

func (e *dataEncoder) u64(v uint64) { e.b = strconv.AppendUint(e.b, v, 10) }

func (e *dataEncoder) boolean(v bool) {
	if v {
		e.raw("true")
	} else {
		e.raw("false")
	}
}

// f64 is encoding/json's floatEncoder for float64.
func (e *dataEncoder) f64(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		if e.err == nil {
			e.err = &json.UnsupportedValueError{Value: reflect.ValueOf(f), Str: strconv.FormatFloat(f, 'g', -1, 64)}
		}
		e.raw("null") // the document is abandoned; keep it well formed
		return
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(e.b); n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}

// jsonSafe are the ASCII bytes json.Marshal copies as they are: all but
// the control bytes, ", \, <, > and &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// plainWord tells whether none of the 8 bytes of x needs str's attention:
// none is a control byte, outside ASCII, or one of " \ < > &. Each test
// is the bit trick that finds a zero byte (or one below n) in a word; it
// can report a byte that is not there only above one that is, so a word
// it calls plain is plain. " and & (0x22, 0x26) are the two bytes that
// read 0x26 with bit 2 set, < and > (0x3c, 0x3e) the two that read 0x3e
// with bit 1 set: three tests find the five. (Small enough to be inlined.)
func plainWord(x uint64) bool {
	const lo = 0x0101010101010101
	qa, lg, bs := (x|0x04*lo)^0x26*lo, (x|0x02*lo)^0x3e*lo, x^'\\'*lo
	t := x | (x-0x20*lo)&^x | (qa-lo)&^qa | (lg-lo)&^lg | (bs-lo)&^bs
	return t&(0x80*lo) == 0
}

// load64 is the first 8 bytes of s as a little-endian word (one load:
// the compiler merges the bytes' loads).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// str is encoding/json's appendString with HTML escaping. Runs of plain
// bytes are skipped a word at a time (frames are long, and mostly plain);
// a word that is not plain is taken byte by byte.
func (e *dataEncoder) str(s string) {
	b := append(e.b, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plainWord(load64(s[i:])) {
			i += 8
		}
		for end := min(i+8, len(s)); i < end; {
			c := s[i]
			if c < utf8.RuneSelf {
				if jsonSafe[c] {
					i++
					continue
				}
				b = append(b, s[start:i]...)
				switch c {
				case '\\', '"':
					b = append(b, '\\', c)
				case '\b':
					b = append(b, '\\', 'b')
				case '\f':
					b = append(b, '\\', 'f')
				case '\n':
					b = append(b, '\\', 'n')
				case '\r':
					b = append(b, '\\', 'r')
				case '\t':
					b = append(b, '\\', 't')
				default:
					b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				}
				i++
				start = i
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, `\ufffd`...)
				i += size
				start = i
				continue
			}
			if r == '\u2028' || r == '\u2029' {
				b = append(b, s[start:i]...)
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
				i += size
				start = i
				continue
			}
			i += size
		}
	}
	b = append(b, s[start:]...)
	e.b = append(b, '"')
}

// knownStr is str, from done when s was met before. Short strings are
// written afresh: hashing them costs about as much.
func (e *dataEncoder) knownStr(s string) {
	if len(s) < 32 {
		e.str(s)
		return
	}
	if at, ok := e.known[s]; ok {
		e.b = append(e.b, e.done[at[0]:at[1]]...)
		return
	}
	from := len(e.b)
	e.str(s)
	if e.known == nil {
		e.known = map[string][2]int{}
	}
	e.known[s] = [2]int{len(e.done), len(e.done) + len(e.b) - from}
	e.done = append(e.done, e.b[from:]...)
}

// Arrays and maps. A nil slice or map is null, as json.Marshal has it.

func (e *dataEncoder) strs(v []string) {
	if v == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	for i, s := range v {
		if i > 0 {
			e.b = append(e.b, ',')
			e.more()
		}
		e.knownStr(s)
	}
	e.b = append(e.b, ']')
}

// numbers writes an array of integers: the timeline's columns (tens of
// thousands each) and lists of indices.
func numbers[T int | int64 | uint32 | uint64](e *dataEncoder, v []T) {
	if v == nil {
		e.raw("null")
		return
	}
	b := append(e.b, '[') // local: a store into e.b is a write barrier while the collector runs
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
			if i&1023 == 0 && len(b) >= dataChunk {
				e.b = b
				e.flush()
				b = e.b
			}
		}
		if x < 0 { // never for the unsigned types; their values fit uint64
			b = strconv.AppendInt(b, int64(x), 10)
		} else {
			b = strconv.AppendUint(b, uint64(x), 10)
		}
	}
	e.b = append(b, ']')
}

// list writes a slice of structs, each by one.
func list[T any](e *dataEncoder, v []T, one func(*dataEncoder, *T)) {
	if v == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	for i := range v {
		if i > 0 {
			e.b = append(e.b, ',')
			e.more()
		}
		one(e, &v[i])
	}
	e.b = append(e.b, ']')
}

// object writes a map by its sorted keys, as json.Marshal orders them.
func object[V any](e *dataEncoder, m map[string]V, one func(*dataEncoder, *V)) {
	if m == nil {
		e.raw("null")
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
			e.more()
		}
		e.str(k)
		e.b = append(e.b, ':')
		v := m[k]
		one(e, &v)
	}
	e.b = append(e.b, '}')
}

func (e *dataEncoder) i64Value(v *int64)    { e.i64(*v) }
func (e *dataEncoder) f64Value(v **float64) { e.f64p(*v) }

func (e *dataEncoder) i64p(v *int64) {
	if v == nil {
		e.raw("null")
		return
	}
	e.i64(*v)
}

func (e *dataEncoder) f64p(v *float64) {
	if v == nil {
		e.raw("null")
		return
	}
	e.f64(*v)
}

func (e *dataEncoder) boolp(v *bool) {
	if v == nil {
		e.raw("null")
		return
	}
	e.boolean(*v)
}

// The document's types, each field in its struct's order.

func (e *dataEncoder) data(d *htmlData) {
	e.raw(`{"runs":`)
	list(e, d.Runs, (*dataEncoder).run)
	e.raw(`,"best":`)
	if d.Best == nil {
		e.raw("null")
	} else {
		e.i64(int64(*d.Best))
	}
	e.raw(`,"tied":`)
	numbers(e, d.Tied)
	e.raw(`,"same_setting":`)
	e.boolean(d.SameSetting)
	e.raw(`,"same_trace":`)
	e.boolean(d.SameTrace)
	e.raw(`,"multi_device":`)
	e.boolean(d.MultiDevice)
	e.raw(`,"par":`)
	e.par(d.PAR)
	e.raw(`,"version":`)
	e.i64(int64(d.Version))
	e.raw("}")
}

func (e *dataEncoder) run(r *htmlRun) {
	e.raw(`{"id":`)
	e.i64(int64(r.ID))
	e.raw(`,"label":`)
	e.str(r.Label)
	e.raw(`,"report":`)
	e.report(r.Report)
	e.raw(`,"timeline":`)
	e.timeline(&r.Timeline)
	e.raw(`,"sample_every":`)
	e.i64(r.SampleEvery)
	e.raw(`,"peak_event":`)
	e.i64(r.PeakEvent)
	e.raw(`,"peak_live":`)
	e.u64(r.PeakLive)
	e.raw(`,"ooms":`)
	list(e, r.OOMs, (*dataEncoder).htmlOOM)
	e.raw(`,"captures":`)
	list(e, r.Captures, (*dataEncoder).capture)
	e.raw(`,"sites":`)
	object(e, r.Sites, (*dataEncoder).site)
	e.raw(`,"top_live":`)
	numbers(e, r.TopLive)
	e.raw(`,"top_waste":`)
	numbers(e, r.TopWaste)
	e.raw(`,"colored_sites":`)
	numbers(e, r.ColoredSites)
	e.raw("}")
}

func (e *dataEncoder) timeline(t *htmlTimeline) {
	e.raw(`{"event":`)
	numbers(e, t.Event)
	e.raw(`,"time_us":`)
	numbers(e, t.TimeUS)
	e.raw(`,"live":`)
	numbers(e, t.Live)
	e.raw(`,"max_live":`)
	numbers(e, t.MaxLive)
	e.raw(`,"requested":`)
	numbers(e, t.Requested)
	e.raw(`,"reserved":`)
	numbers(e, t.Reserved)
	e.raw(`,"max_reserved":`)
	numbers(e, t.MaxReserved)
	e.raw(`,"free":`)
	numbers(e, t.Free)
	e.raw(`,"largest_free":`)
	numbers(e, t.LargestFree)
	e.raw(`,"devices":`)
	list(e, t.Devices, (*dataEncoder).deviceTimeline)
	e.raw(`,"detail":[`)
	e.i64(int64(t.Detail[0]))
	e.raw(",")
	e.i64(int64(t.Detail[1]))
	e.raw("]}")
}

func (e *dataEncoder) deviceTimeline(t *htmlDeviceTimeline) {
	e.raw(`{"index":`)
	e.i64(int64(t.Index))
	e.raw(`,"live":`)
	numbers(e, t.Live)
	e.raw(`,"max_live":`)
	numbers(e, t.MaxLive)
	e.raw(`,"requested":`)
	numbers(e, t.Requested)
	e.raw(`,"reserved":`)
	numbers(e, t.Reserved)
	e.raw(`,"max_reserved":`)
	numbers(e, t.MaxReserved)
	e.raw("}")
}

func (e *dataEncoder) htmlOOM(o *htmlOOM) {
	e.raw(`{"event":`)
	e.i64(o.Event)
	e.raw(`,"device":`)
	e.i64(int64(o.Device))
	e.raw(`,"size":`)
	e.u64(o.Size)
	e.raw(`,"recorded":`)
	e.boolean(o.Recorded)
	e.raw(`,"message":`)
	e.str(o.Message)
	e.raw("}")
}

func (e *dataEncoder) capture(c *htmlCapture) {
	e.raw(`{"title":`)
	e.str(c.Title)
	e.raw(`,"kind":`)
	e.str(c.Kind)
	e.raw(`,"event":`)
	e.i64(c.Event)
	e.raw(`,"live_bytes":`)
	e.u64(c.LiveBytes)
	e.raw(`,"reserved_bytes":`)
	e.u64(c.ReservedBytes)
	e.raw(`,"free_bytes":`)
	e.u64(c.FreeBytes)
	e.raw(`,"stranded_bytes":`)
	e.u64(c.StrandedBytes)
	e.raw(`,"largest_free_block_bytes":`)
	e.u64(c.LargestFreeBlockBytes)
	e.raw(`,"segments":`)
	list(e, c.Segments, (*dataEncoder).segment)
	e.raw(`,"truncated":`)
	e.boolean(c.Truncated)
	e.raw("}")
}

func (e *dataEncoder) segment(s *profiler.SegmentLayout) {
	e.raw(`{"device":`)
	e.i64(int64(s.Device))
	e.raw(`,"stream":`)
	e.u64(s.Stream)
	e.raw(`,"address":`)
	e.u64(s.Address)
	e.raw(`,"size":`)
	e.u64(s.Size)
	if s.Expandable {
		e.raw(`,"expandable":true`)
	}
	e.raw(`,"blocks":`)
	if s.Blocks == nil {
		e.raw("null}")
		return
	}
	e.b = append(e.b, '[')
	for i := range s.Blocks {
		bl := &s.Blocks[i]
		if i > 0 {
			e.b = append(e.b, ',')
			e.more()
		}
		e.raw(`{"offset":`)
		e.u64(bl.Offset)
		e.raw(`,"size":`)
		e.u64(bl.Size)
		e.raw(`,"allocated":`)
		e.boolean(bl.Allocated)
		e.raw(`,"stack":`)
		e.u64(uint64(bl.Stack))
		e.b = append(e.b, '}')
	}
	e.raw("]}")
}

func (e *dataEncoder) site(s *htmlSite) {
	e.raw(`{"stack":`)
	e.u64(uint64(s.Stack))
	e.raw(`,"name":`)
	e.str(s.Name)
	e.raw(`,"label":`)
	e.str(s.Label)
	e.raw(`,"frames":`)
	e.strs(s.Frames)
	e.raw(`,"live_bytes_at_peak":`)
	e.u64(s.LiveBytesAtPeak)
	e.raw(`,"stranded_bytes_at_peak":`)
	e.u64(s.StrandedBytesAtPeak)
	e.raw(`,"alloc_count":`)
	e.u64(s.AllocCount)
	e.raw(`,"alloc_bytes":`)
	e.u64(s.AllocBytes)
	e.raw(`,"max_live_bytes":`)
	e.u64(s.MaxLiveBytes)
	e.raw("}")
}

func (e *dataEncoder) par(p *htmlPAR) {
	if p == nil {
		e.raw("null")
		return
	}
	grid := func(g [][]*float64) {
		if g == nil {
			e.raw("null")
			return
		}
		e.b = append(e.b, '[')
		for i, row := range g {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			list(e, row, (*dataEncoder).f64Value)
		}
		e.b = append(e.b, ']')
	}
	e.raw(`{"title":`)
	e.str(p.Title)
	e.raw(`,"settings":`)
	e.strs(p.Settings)
	e.raw(`,"k":`)
	numbers(e, p.K)
	e.raw(`,"p_oom":`)
	grid(p.POOM)
	e.raw(`,"throughput":`)
	grid(p.Throughput)
	e.raw(`,"throughput_unit":`)
	e.str(p.ThroughputUnit)
	e.raw(`,"saturation":`)
	numbers(e, p.Saturation)
	e.raw(`,"notes":`)
	e.strs(p.Notes)
	e.raw("}")
}

// The JSON report's types (json.go), as a run's "report".

func (e *dataEncoder) report(r *jsonReport) {
	if r == nil {
		e.raw("null")
		return
	}
	e.raw(`{"source":`)
	e.str(r.Source)
	e.raw(`,"file":`)
	e.str(r.File)
	e.raw(`,"events":`)
	e.i64(r.Events)
	e.raw(`,"config":`)
	e.str(r.Config)
	e.raw(`,"config_source":`)
	e.str(r.ConfigSource)
	e.raw(`,"policy":`)
	e.str(r.Policy)
	e.raw(`,"capacity":`)
	e.u64(r.Capacity)
	e.raw(`,"capacity_source":`)
	e.str(r.CapacitySource)
	e.raw(`,"stopped":`)
	e.boolean(r.Stopped)
	e.raw(`,"stopped_at":`)
	e.i64p(r.StoppedAt)
	e.raw(`,"skipped":`)
	e.i64(r.Skipped)
	e.raw(`,"stats":`)
	object(e, r.Stats, (*dataEncoder).i64Value)
	e.raw(`,"fragmentation":`)
	e.fragmentation(&r.Fragmentation)
	e.raw(`,"device_calls":`)
	e.calls(&r.DeviceCalls)
	if r.Check != nil {
		e.raw(`,"check":`)
		e.check(r.Check)
	}
	if r.StatsCheck != nil {
		e.raw(`,"stats_check":`)
		e.statsCheck(r.StatsCheck)
	}
	e.raw(`,"ooms":`)
	list(e, r.OOMs, (*dataEncoder).jsonOOM)
	e.raw(`,"retries":`)
	list(e, r.Retries, (*dataEncoder).retry)
	if len(r.Markers) > 0 {
		e.raw(`,"markers":`)
		list(e, r.Markers, (*dataEncoder).marker)
	}
	if r.MarkersDropped != 0 {
		e.raw(`,"markers_dropped":`)
		e.i64(r.MarkersDropped)
	}
	e.raw(`,"reconstructed":`)
	e.reconstruction(r.Reconstructed)
	e.raw(`,"top_sites":`)
	list(e, r.TopSites, (*dataEncoder).jsonSite)
	e.raw(`,"top_stranding_sites":`)
	list(e, r.TopStranding, (*dataEncoder).jsonSite)
	e.raw(`,"devices":`)
	list(e, r.Devices, (*dataEncoder).device)
	e.raw(`,"empty_devices":{"count":`)
	e.i64(int64(r.EmptyDevices.Count))
	e.raw(`,"ranges":`)
	e.str(r.EmptyDevices.Ranges)
	e.raw(`},"sample_every":`)
	e.i64(r.SampleEvery)
	e.raw(`,"timeline":`)
	list(e, r.Timeline, (*dataEncoder).sample)
	e.raw(`,"notes":`)
	e.strs(r.Notes)
	e.raw("}")
}

func (e *dataEncoder) fragmentation(f *jsonFragmentation) {
	if f == nil {
		e.raw("null")
		return
	}
	e.raw(`{"peak_live_bytes":`)
	e.u64(f.PeakLiveBytes)
	e.raw(`,"peak_live_event":`)
	e.i64p(f.PeakLiveEvent)
	e.raw(`,"peak_reserved_bytes":`)
	e.u64(f.PeakReservedBytes)
	e.raw(`,"peak_reserved_event":`)
	e.i64p(f.PeakReservedEvent)
	e.raw(`,"waste_ratio":`)
	e.f64(f.WasteRatio)
	e.raw(`,"largest_free_block_bytes_at_peak":`)
	e.u64(f.LargestFreeBlockBytesAtPeak)
	e.raw(`,"free_bytes_at_peak":`)
	e.u64(f.FreeBytesAtPeak)
	e.raw(`,"reserved_bytes_at_peak":`)
	e.u64(f.ReservedBytesAtPeak)
	e.raw(`,"stranded_bytes_at_peak":`)
	e.u64(f.StrandedBytesAtPeak)
	e.raw(`,"internal_waste_bytes_at_peak":`)
	e.u64(f.InternalWasteBytesAtPeak)
	e.raw(`,"external_fragmentation_at_peak":`)
	e.f64(f.ExternalFragmentationAtPeak)
	e.raw(`,"max_internal_waste_bytes":`)
	e.u64(f.MaxInternalWasteBytes)
	e.raw(`,"max_external_fragmentation":`)
	e.f64(f.MaxExternalFragmentation)
	e.raw("}")
}

func (e *dataEncoder) calls(c *jsonCalls) {
	e.raw(`{"cuda_malloc":`)
	e.u64(c.Mallocs)
	e.raw(`,"cuda_free":`)
	e.u64(c.Frees)
	e.raw(`,"cu_mem_map":`)
	e.u64(c.Maps)
	e.raw(`,"cu_mem_unmap":`)
	e.u64(c.Unmaps)
	e.raw(`,"alloc_retries":`)
	e.i64(c.AllocRetries)
	e.raw(`,"ooms":`)
	e.i64(c.OOMs)
	e.raw(`,"modelled_time_ns":`)
	e.i64(c.TimeNS)
	e.raw(`,"measured_time_ns":`)
	e.i64(c.MeasuredTimeNS)
	e.raw(`,"time_source":`)
	e.str(c.TimeSource)
	e.raw("}")
}

func (e *dataEncoder) check(c *jsonCheck) {
	e.raw(`{"decisions_expected":`)
	e.i64(c.DecisionsExpected)
	e.raw(`,"decisions_matched":`)
	e.i64(c.DecisionsMatched)
	e.raw(`,"passed":`)
	e.boolp(c.Passed)
	if c.NothingToCheck {
		e.raw(`,"nothing_to_check":true`)
	}
	e.raw(`,"first_divergence":`)
	if d := c.FirstDivergence; d == nil {
		e.raw("null")
	} else {
		e.raw(`{"event":`)
		e.i64(d.Event)
		e.raw(`,"device":`)
		e.i64(int64(d.Device))
		e.raw(`,"expected":`)
		e.str(d.Expected)
		e.raw(`,"actual":`)
		e.str(d.Actual)
		e.raw("}")
	}
	e.raw(`,"final_segments_match":`)
	e.boolp(c.FinalSegmentsMatch)
	if c.FinalDifference != "" {
		e.raw(`,"final_difference":`)
		e.str(c.FinalDifference)
	}
	e.raw("}")
}

func (e *dataEncoder) statsCheck(c *jsonStatsCheck) {
	e.raw(`{"file":`)
	e.str(c.File)
	e.raw(`,"device":`)
	e.i64(int64(c.Device))
	e.raw(`,"passed":`)
	e.boolean(c.Passed)
	e.raw(`,"exact_compared":`)
	e.i64(int64(c.Exact))
	e.raw(`,"exact_matched":`)
	e.i64(int64(c.ExactMatched))
	e.raw(`,"inferred_compared":`)
	e.i64(int64(c.Inferred))
	e.raw(`,"inferred_matched":`)
	e.i64(int64(c.InferredMatched))
	e.raw(`,"replay_stopped":`)
	e.boolean(c.Stopped)
	e.raw(`,"differences":`)
	list(e, c.Differences, func(e *dataEncoder, d *jsonStatDiff) {
		e.raw(`{"key":`)
		e.str(d.Key)
		e.raw(`,"recorded":`)
		e.i64(d.Recorded)
		e.raw(`,"replayed":`)
		e.i64(d.Replayed)
		e.raw(`,"exact":`)
		e.boolean(d.Exact)
		if d.Why != "" {
			e.raw(`,"why":`)
			e.str(d.Why)
		}
		e.raw("}")
	})
	e.raw(`,"not_compared":`)
	list(e, c.NotCompared, func(e *dataEncoder, s *jsonStatSkip) {
		e.raw(`{"key":`)
		e.str(s.Key)
		e.raw(`,"why":`)
		e.str(s.Why)
		e.raw("}")
	})
	e.raw("}")
}

func (e *dataEncoder) jsonOOM(o *jsonOOM) {
	e.raw(`{"event":`)
	e.i64(o.Event)
	e.raw(`,"device":`)
	e.i64(int64(o.Device))
	e.raw(`,"size":`)
	e.u64(o.Size)
	e.raw(`,"recorded":`)
	e.boolean(o.Recorded)
	e.raw(`,"message":`)
	e.str(o.Message)
	if s := o.State; s != nil {
		e.raw(`,"state":{"event":`)
		e.i64(s.Event)
		e.raw(`,"device":`)
		e.i64(int64(s.Device))
		e.raw(`,"requested_bytes":`)
		e.u64(s.RequestedBytes)
		e.raw(`,"rounded_bytes":`)
		e.u64(s.RoundedBytes)
		e.raw(`,"alloc_bytes":`)
		e.u64(s.AllocBytes)
		e.raw(`,"live_bytes":`)
		e.u64(s.LiveBytes)
		e.raw(`,"reserved_bytes":`)
		e.u64(s.ReservedBytes)
		e.raw(`,"free_bytes":`)
		e.u64(s.FreeBytes)
		e.raw(`,"largest_free_block_bytes":`)
		e.u64(s.LargestFreeBlockBytes)
		e.raw(`,"external_fragmentation":`)
		e.f64(s.ExternalFragmentation)
		e.raw(`,"device_free_bytes":`)
		e.u64(s.DeviceFreeBytes)
		e.raw(`,"device_total_bytes":`)
		e.u64(s.DeviceTotalBytes)
		if s.Capture != nil {
			e.raw(`,"capture":`)
			e.profCapture(s.Capture)
		}
		e.raw("}")
	}
	e.raw("}")
}

// profCapture is a profiler.Capture.
func (e *dataEncoder) profCapture(c *profiler.Capture) {
	if c == nil {
		e.raw("null")
		return
	}
	e.raw(`{"event":`)
	e.i64(c.Event)
	e.raw(`,"live_bytes":`)
	e.u64(c.LiveBytes)
	e.raw(`,"requested_bytes":`)
	e.u64(c.RequestedBytes)
	e.raw(`,"reserved_bytes":`)
	e.u64(c.ReservedBytes)
	e.raw(`,"free_bytes":`)
	e.u64(c.FreeBytes)
	e.raw(`,"largest_free_block_bytes":`)
	e.u64(c.LargestFreeBlockBytes)
	e.raw(`,"external_fragmentation":`)
	e.f64(c.ExternalFragmentation)
	e.raw(`,"stranded_bytes":`)
	e.u64(c.StrandedBytes)
	e.raw(`,"segments":`)
	e.i64(int64(c.Segments))
	e.raw(`,"pinned_segments":`)
	e.i64(int64(c.PinnedSegments))
	e.raw(`,"sites":`)
	list(e, c.Sites, func(e *dataEncoder, s *profiler.SiteBytes) {
		e.raw(`{"stack":`)
		e.u64(uint64(s.Stack))
		e.raw(`,"device":`)
		e.i64(int64(s.Device))
		e.raw(`,"stream":`)
		e.u64(s.Stream)
		e.raw(`,"blocks":`)
		e.i64(int64(s.Blocks))
		e.raw(`,"live_bytes":`)
		e.u64(s.LiveBytes)
		e.raw(`,"stranded_bytes":`)
		e.u64(s.StrandedBytes)
		e.raw("}")
	})
	if len(c.Layout) > 0 {
		e.raw(`,"layout":`)
		list(e, c.Layout, (*dataEncoder).segment)
	}
	e.raw("}")
}

func (e *dataEncoder) retry(r *profiler.Retry) {
	e.raw(`{"event":`)
	e.i64(r.Event)
	e.raw(`,"device":`)
	e.i64(int64(r.Device))
	e.raw(`,"count":`)
	e.i64(r.Count)
	e.raw("}")
}

func (e *dataEncoder) marker(m *profiler.Marker) {
	e.raw(`{"event":`)
	e.i64(m.Event)
	e.raw(`,"device":`)
	e.i64(int64(m.Device))
	e.raw(`,"time_us":`)
	e.i64(m.TimeUS)
	e.raw(`,"label":`)
	e.str(m.Label)
	e.raw(`,"stage":`)
	e.str(m.Stage)
	e.raw("}")
}

func (e *dataEncoder) reconstruction(r *jsonReconstruction) {
	if r == nil {
		e.raw("null")
		return
	}
	e.raw(`{"segments":`)
	e.i64(int64(r.Segments))
	e.raw(`,"segment_bytes":`)
	e.u64(r.SegmentBytes)
	e.raw(`,"live_blocks":`)
	e.i64(int64(r.LiveBlocks))
	e.raw(`,"live_bytes":`)
	e.u64(r.LiveBytes)
	e.raw(`,"unresolved":`)
	e.i64(int64(r.Unresolved))
	e.raw(`,"inferred_sizes":`)
	e.i64(int64(r.InferredSizes))
	e.raw(`,"notes":`)
	e.strs(r.Notes)
	e.raw("}")
}

func (e *dataEncoder) jsonSite(s *jsonSite) {
	e.raw(`{"stack":`)
	e.u64(uint64(s.Stack))
	e.raw(`,"label":`)
	e.str(s.Label)
	e.raw(`,"frames":`)
	e.strs(s.Frames)
	e.raw(`,"live_bytes_at_peak":`)
	e.u64(s.LiveBytesAtPeak)
	e.raw(`,"stranded_bytes_at_peak":`)
	e.u64(s.StrandedBytesAtPeak)
	e.raw(`,"blocks_at_peak":`)
	e.i64(int64(s.BlocksAtPeak))
	e.raw(`,"alloc_count":`)
	e.u64(s.AllocCount)
	e.raw(`,"alloc_bytes":`)
	e.u64(s.AllocBytes)
	e.raw(`,"max_live_bytes":`)
	e.u64(s.MaxLiveBytes)
	e.raw("}")
}

func (e *dataEncoder) device(d *jsonDevice) {
	e.raw(`{"index":`)
	e.i64(int64(d.Index))
	e.raw(`,"capacity":`)
	e.u64(d.Capacity)
	e.raw(`,"capacity_source":`)
	e.str(d.CapacitySource)
	e.raw(`,"name":`)
	e.str(d.Name)
	e.raw(`,"stats":`)
	object(e, d.Stats, (*dataEncoder).i64Value)
	e.raw(`,"fragmentation":`)
	e.fragmentation(d.Fragmentation)
	e.raw(`,"calls":`)
	object(e, d.Calls, func(e *dataEncoder, c *jsonCallCount) {
		e.raw(`{"calls":`)
		e.u64(c.Calls)
		e.raw(`,"failures":`)
		e.u64(c.Failures)
		e.raw(`,"time_ns":`)
		e.i64(c.TimeNS)
		e.raw("}")
	})
	e.raw(`,"time_source":`)
	e.str(d.TimeSource)
	e.raw(`,"peak":`)
	e.profCapture(d.Peak)
	e.raw("}")
}

// sample is a profiler.Sample (the JSON report's timeline; the page's run
// has it as columns and leaves this null).
func (e *dataEncoder) sample(s *profiler.Sample) {
	e.raw(`{"event":`)
	e.i64(s.Event)
	if s.TimeUS != 0 {
		e.raw(`,"time_us":`)
		e.i64(s.TimeUS)
	}
	e.raw(`,"live_bytes":`)
	e.u64(s.LiveBytes)
	e.raw(`,"reserved_bytes":`)
	e.u64(s.ReservedBytes)
	e.raw(`,"requested_bytes":`)
	e.u64(s.RequestedBytes)
	e.raw(`,"max_live_bytes":`)
	e.u64(s.MaxLiveBytes)
	e.raw(`,"max_reserved_bytes":`)
	e.u64(s.MaxReservedBytes)
	e.raw(`,"free_bytes":`)
	e.u64(s.FreeBytes)
	e.raw(`,"largest_free_block_bytes":`)
	e.u64(s.LargestFreeBlock)
	e.raw(`,"external_fragmentation":`)
	e.f64(s.ExternalFragmentation)
	if len(s.Devices) > 0 {
		e.raw(`,"devices":`)
		list(e, s.Devices, func(e *dataEncoder, d *profiler.DeviceSample) {
			e.raw(`{"index":`)
			e.i64(int64(d.Index))
			e.raw(`,"live_bytes":`)
			e.u64(d.LiveBytes)
			e.raw(`,"reserved_bytes":`)
			e.u64(d.ReservedBytes)
			e.raw(`,"max_live_bytes":`)
			e.u64(d.MaxLiveBytes)
			e.raw(`,"max_reserved_bytes":`)
			e.u64(d.MaxReservedBytes)
			e.raw(`,"requested_bytes":`)
			e.u64(d.RequestedBytes)
			e.raw(`,"free_bytes":`)
			e.u64(d.FreeBytes)
			e.raw(`,"largest_free_block_bytes":`)
			e.u64(d.LargestFreeBlock)
			e.raw("}")
		})
	}
	e.raw("}")
}

// finiteData fails as json.Marshal(d) would on a NaN or an infinity: on
// the first of them in the document's order, with the same error. Every
// float of the document is here; TestDataEncoderAsMarshal puts them in
// every field and checks that nothing is written on an error.
func finiteData(d *htmlData) error {
	var bad *float64
	check := func(f *float64) {
		if bad == nil && (math.IsNaN(*f) || math.IsInf(*f, 0)) {
			bad = f
		}
	}
	fragmentation := func(f *jsonFragmentation) {
		if f != nil {
			check(&f.WasteRatio)
			check(&f.ExternalFragmentationAtPeak)
			check(&f.MaxExternalFragmentation)
		}
	}
	capture := func(c *profiler.Capture) {
		if c != nil {
			check(&c.ExternalFragmentation)
		}
	}
	for i := range d.Runs {
		r := d.Runs[i].Report
		if r == nil {
			continue
		}
		fragmentation(&r.Fragmentation)
		for _, o := range r.OOMs {
			if o.State != nil {
				check(&o.State.ExternalFragmentation)
				capture(o.State.Capture)
			}
		}
		for _, dv := range r.Devices {
			fragmentation(dv.Fragmentation)
			capture(dv.Peak)
		}
		for j := range r.Timeline {
			check(&r.Timeline[j].ExternalFragmentation)
		}
	}
	if p := d.PAR; p != nil {
		for _, g := range [][][]*float64{p.POOM, p.Throughput} {
			for _, row := range g {
				for _, f := range row {
					if f != nil {
						check(f)
					}
				}
			}
		}
	}
	if bad == nil {
		return nil
	}
	return &json.UnsupportedValueError{Value: reflect.ValueOf(*bad), Str: strconv.FormatFloat(*bad, 'g', -1, 64)}
}

package trace

// RMM logging_resource_adaptor CSV logs.
//
// RMM's logging adaptor (rapidsai/rmm, logging_resource_adaptor.hpp and,
// since the rapids-logger move, src/mr/detail/logging_resource_adaptor_impl.cpp)
// writes the header line "Thread,Time,Action,Pointer,Size,Stream" and then
// one line per call, with the logger pattern "%t,%H:%M:%S.%f,%v":
//
//	2342727,15:47:02.841961,allocate,0x10012400000,1048576,0
//	2342727,15:47:02.841977,free,0x10012400000,1048576,0
//	2342727,15:47:03.000001,allocate failure,(nil),1099511627776,0x2
//
// Action is "allocate", "allocate failure" (logged before the exception is
// rethrown, with a null pointer) or "free". Pointer is %p: "0x..." in both
// generations, null as "0x0" (fmt, older RMM) or "(nil)" (printf, newer).
// Size is decimal bytes as the caller asked (allocate failure: the request
// that failed). Stream is the cudaStream_t in hex: fmt::ptr's "0x0" in older
// RMM, an ostream's "0" or "0x2" in newer. Thread is the OS thread id; Time
// is the wall-clock time of day with microseconds and no date.
//
// The mapping (docs/trace-format.md has the table): allocate -> alloc;
// free -> free_requested immediately followed by free_completed (RMM has no
// deferred frees), both with the logged size; allocate failure -> oom with
// Size the requested bytes and DeviceFree 0 (unknown). A log covers one
// device (RMM's Python layer writes one file per device, named
// "<name>.dev<N>"), so every event gets the device parsed from such a file
// name, else 0. Thread ids are not kept. TimeUS is microseconds since the
// midnight before the first line (a step back of more than 12 hours is taken
// as the next day); a Time that is a plain number is taken as seconds since
// the epoch (an older documentation example shows that form); any other
// Time gives 0.
//
// The reader is lenient where RMM versions differ and strict where a wrong
// guess would change the replay: columns are found by their header names
// (extra columns, in the header or trailing on a line, are ignored); a
// repeated header line is skipped; a log without its header is read with the
// canonical column order when its first line parses as data. Bad hex, a
// negative or non-numeric size, too few columns or an unknown action stop
// the reader with a *FormatError naming the line.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

const rmmHeader = "Thread,Time,Action,Pointer,Size,Stream"

// RMMImporterVersion is the Tools["memreplay-importer"] value of an
// imported RMM log; bump it when the conversion changes meaning.
const RMMImporterVersion = "rmm-log/1"

// rmm column slots.
const (
	rmmColThread = iota
	rmmColTime
	rmmColAction
	rmmColPointer
	rmmColSize
	rmmColStream
	numRMMCols
)

var rmmColNames = [numRMMCols]string{"thread", "time", "action", "pointer", "size", "stream"}

const (
	rmmMaxFields = 64       // columns a line may have; more are ignored
	rmmMaxLine   = 64 << 10 // a longer line is not an RMM log line
	usPerDay     = 24 * 3600 * 1_000_000
)

// IsRMM reports whether prefix (the first bytes of a file) starts with an
// RMM logging_resource_adaptor header line.
func IsRMM(prefix []byte) bool {
	prefix = bytes.TrimPrefix(prefix, []byte("\xef\xbb\xbf"))
	line, _, complete := bytes.Cut(prefix, []byte("\n"))
	line = bytes.TrimRight(line, "\r")
	if !complete && len(line) < len(rmmHeader) {
		// A short prefix: it must agree with the header as far as it goes.
		return len(line) >= len("Thread,") && strings.HasPrefix(rmmHeader, string(line))
	}
	_, ok := rmmColumns(line)
	return ok
}

// rmmColumns maps a header line's column names to slots; ok requires the
// Action, Pointer and Size columns.
func rmmColumns(line []byte) (cols [numRMMCols]int, ok bool) {
	for i := range cols {
		cols[i] = -1
	}
	n := 0
	for f := range bytes.SplitSeq(line, []byte(",")) {
		name := strings.ToLower(string(bytes.TrimSpace(f)))
		for k, c := range rmmColNames {
			if name == c && cols[k] < 0 {
				cols[k] = n
			}
		}
		n++
	}
	return cols, cols[rmmColAction] >= 0 && cols[rmmColPointer] >= 0 && cols[rmmColSize] >= 0
}

// ReadRMM reads a whole RMM log into memory. For large logs prefer
// NewRMMReader, which streams.
func ReadRMM(r io.Reader, name string) (*Trace, error) {
	rr, err := NewRMMReader(r, name)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	return ReadAll(rr)
}

// NewRMMReader reads the header line of an RMM log and returns a Reader
// that parses one line per event (two for a free). name is used in error
// messages and to find the device ordinal ("log.dev1.csv" is device 1).
func NewRMMReader(r io.Reader, name string) (Reader, error) {
	rr := &rmmReader{
		name:   name,
		br:     bufio.NewReaderSize(r, rmmMaxLine),
		stacks: NewStacks(),
		dev:    rmmDevice(name),
	}
	rr.hdr = Header{
		Version:    FormatVersion,
		Source:     SourceRMM,
		SourceFile: name,
		Devices:    []Device{{Index: rr.dev}},
		Tools:      map[string]string{"memreplay-importer": RMMImporterVersion},
		Notes: []string{
			"imported from an RMM logging_resource_adaptor CSV log: free is logged once and becomes free_requested + free_completed at the same time; allocate failure becomes oom with the requested size; thread ids are not kept",
			fmt.Sprintf("device %d for every event (RMM logs one device per file; the ordinal comes from a \".devN\" file name, else 0)", rr.dev),
			"TimeUS is microseconds since the midnight before the first line: RMM logs the time of day only (a step back of more than 12 hours is taken as the next day)",
		},
	}
	// The header: the first non-blank line.
	for {
		line, err := rr.readLine()
		if err != nil {
			if err == io.EOF {
				return nil, &FormatError{File: name, Offset: rr.off, Event: -1, Msg: "empty file: not an RMM log (no header line)"}
			}
			return nil, err
		}
		if rr.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if cols, ok := rmmColumns(line); ok {
			rr.col = cols
			rr.ncols = bytes.Count(line, []byte(",")) + 1
			rr.header = string(bytes.TrimSpace(line))
			break
		}
		// No header: accept the canonical layout if the line parses as data.
		rr.col = [numRMMCols]int{0, 1, 2, 3, 4, 5}
		rr.ncols = numRMMCols
		rr.header = rmmHeader
		if rr.split(line) == nil {
			if _, ok := rmmAction(rr.fields[rmmColAction]); ok {
				rr.firstLine = append([]byte(nil), line...)
				rr.firstOff, rr.firstNo = rr.off, rr.line
				rr.hdr.Notes = append(rr.hdr.Notes, "the log has no header line: read with the columns "+rmmHeader)
				break
			}
		}
		return nil, &FormatError{File: name, Offset: rr.off, Event: -1,
			Msg: fmt.Sprintf("line %d: not an RMM log: expected the header %q", rr.line, rmmHeader)}
	}
	return rr, nil
}

// rmmDevice finds N in a ".devN" component of the file's base name.
func rmmDevice(name string) int32 {
	base := filepath.Base(name)
	for i := strings.LastIndex(base, ".dev"); i >= 0; i = strings.LastIndex(base[:i], ".dev") {
		j := i + len(".dev")
		k := j
		for k < len(base) && base[k] >= '0' && base[k] <= '9' {
			k++
		}
		if k > j && (k == len(base) || base[k] == '.') {
			if n, err := strconv.ParseInt(base[j:k], 10, 32); err == nil {
				return int32(n)
			}
		}
	}
	return 0
}

type rmmReader struct {
	name   string
	br     *bufio.Reader
	hdr    Header
	stacks *Stacks
	dev    int32

	col    [numRMMCols]int
	ncols  int
	header string // skipped when it appears again

	firstLine []byte // a headerless log's first line, not yet returned
	firstOff  int64
	firstNo   int64

	fields  [rmmMaxFields][]byte
	nfields int

	line int64 // number (1-based) of the line last read
	off  int64 // byte offset of the line last read
	next int64 // byte offset of the line after it
	rec  int64 // index of the data line being parsed

	pend    Event // the free_completed half of a free
	hasPend bool

	day    int64 // µs added to time-of-day values (midnight rollovers)
	lastTD int64
	sawTD  bool

	err error // sticky; io.EOF at the end
}

func (r *rmmReader) Header() Header             { return r.hdr }
func (r *rmmReader) Stacks() *Stacks            { return r.stacks }
func (r *rmmReader) Initial() ([]Segment, bool) { return nil, false }
func (r *rmmReader) Final() ([]Segment, bool)   { return nil, false }
func (r *rmmReader) Close() error {
	if r.err == nil {
		r.err = &FormatError{File: r.name, Offset: -1, Event: r.rec, Msg: "reader is closed"}
	}
	return nil
}

// readLine returns the next line without its line ending; the slice is
// valid until the next call.
func (r *rmmReader) readLine() ([]byte, error) {
	r.off = r.next
	line, err := r.br.ReadSlice('\n')
	r.next += int64(len(line))
	if len(line) > 0 || err == nil {
		r.line++
	}
	switch {
	case err == bufio.ErrBufferFull:
		return nil, &FormatError{File: r.name, Offset: r.off, Event: r.rec,
			Msg: fmt.Sprintf("line %d: longer than %d bytes: not an RMM log line", r.line, rmmMaxLine)}
	case err == io.EOF && len(line) > 0:
		// A last line without a newline.
	case err == io.EOF:
		return nil, io.EOF
	case err != nil:
		return nil, &FormatError{File: r.name, Offset: r.off, Event: r.rec, Msg: fmt.Sprintf("line %d: reading", r.line), Err: err}
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, nil
}

// split cuts a line into r.fields, trimming blanks around each.
func (r *rmmReader) split(line []byte) error {
	n := 0
	for {
		f, rest, more := bytes.Cut(line, []byte(","))
		if n < rmmMaxFields {
			r.fields[n] = bytes.TrimSpace(f)
		}
		n++
		if !more {
			break
		}
		line = rest
	}
	r.nfields = min(n, rmmMaxFields)
	if n < r.ncols {
		return fmt.Errorf("%d columns, but the header has %d (%s)", n, r.ncols, r.header)
	}
	return nil
}

func (r *rmmReader) field(slot int) []byte {
	if c := r.col[slot]; c >= 0 && c < r.nfields {
		return r.fields[c]
	}
	return nil
}

func (r *rmmReader) Next(e *Event) error {
	if r.err != nil {
		return r.err
	}
	if r.hasPend {
		*e = r.pend
		r.hasPend = false
		return nil
	}
	for {
		var line []byte
		if r.firstLine != nil {
			line, r.off, r.line = r.firstLine, r.firstOff, r.firstNo
			r.firstLine = nil
		} else {
			var err error
			if line, err = r.readLine(); err != nil {
				r.err = err
				return err
			}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if string(bytes.TrimSpace(line)) == r.header { // a second adaptor on the same file
			continue
		}
		if err := r.parse(line, e); err != nil {
			r.err = &FormatError{File: r.name, Offset: r.off, Event: r.rec,
				Msg: fmt.Sprintf("line %d: %v", r.line, err)}
			return r.err
		}
		r.rec++
		return nil
	}
}

func (r *rmmReader) parse(line []byte, e *Event) error {
	if err := r.split(line); err != nil {
		return err
	}
	act := r.field(rmmColAction)
	a, ok := rmmAction(act)
	if !ok {
		return fmt.Errorf("unknown action %q (want allocate, allocate failure or free)", act)
	}
	ptr, ok := parseHex(r.field(rmmColPointer))
	if !ok {
		return fmt.Errorf("bad pointer %q (want hex such as 0x7f0a00000000)", r.field(rmmColPointer))
	}
	sf := r.field(rmmColSize)
	size, ok := parseDec(sf)
	if !ok {
		if len(sf) > 0 && sf[0] == '-' {
			return fmt.Errorf("negative size %q", sf)
		}
		return fmt.Errorf("bad size %q (want decimal bytes)", sf)
	}
	var stream uint64
	if f := r.field(rmmColStream); len(f) > 0 {
		if stream, ok = parseHex(f); !ok {
			return fmt.Errorf("bad stream %q (want a hex handle such as 0x0)", f)
		}
	}
	t := r.time(r.field(rmmColTime))
	*e = Event{Action: a, Device: r.dev, Addr: ptr, Size: size, Stream: stream, TimeUS: t}
	switch a {
	case ActionOOM:
		e.Addr = 0 // logged as null
	case ActionFreeRequested:
		r.pend = *e
		r.pend.Action = ActionFreeCompleted
		r.hasPend = true
	}
	return nil
}

func rmmAction(f []byte) (Action, bool) {
	switch string(f) {
	case "allocate":
		return ActionAlloc, true
	case "free", "deallocate": // "deallocate": an older documentation example
		return ActionFreeRequested, true
	case "allocate failure":
		return ActionOOM, true
	}
	return ActionInvalid, false
}

// time converts a Time field to TimeUS (see the file comment).
func (r *rmmReader) time(f []byte) int64 {
	if len(f) == 0 {
		return 0
	}
	if bytes.IndexByte(f, ':') < 0 {
		// Seconds since the epoch, with an optional fraction.
		whole, frac, _ := bytes.Cut(f, []byte("."))
		s, ok := parseDec(whole)
		us, ok2 := parseFrac(frac)
		if !ok || !ok2 || s > 1<<40 {
			return 0
		}
		return int64(s)*1_000_000 + us
	}
	hms, frac, _ := bytes.Cut(f, []byte("."))
	parts := bytes.Split(hms, []byte(":"))
	if len(parts) != 3 {
		return 0
	}
	h, ok1 := parseDec(parts[0])
	m, ok2 := parseDec(parts[1])
	s, ok3 := parseDec(parts[2])
	us, ok4 := parseFrac(frac)
	if !ok1 || !ok2 || !ok3 || !ok4 || h > 23 || m > 59 || s > 60 {
		return 0
	}
	td := int64((h*60+m)*60+s)*1_000_000 + us
	if r.sawTD && td+usPerDay/2 < r.lastTD {
		r.day += usPerDay
	}
	r.sawTD, r.lastTD = true, td
	return r.day + td
}

// parseFrac reads decimal fraction digits as microseconds (digits past the
// sixth are dropped).
func parseFrac(f []byte) (int64, bool) {
	if len(f) > 9 {
		return 0, false
	}
	var us int64
	for i := 0; i < 6; i++ {
		us *= 10
		if i < len(f) {
			c := f[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			us += int64(c - '0')
		}
	}
	for _, c := range f[min(6, len(f)):] {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	return us, true
}

// parseDec parses an unsigned decimal that fits uint64.
func parseDec(f []byte) (uint64, bool) {
	if len(f) == 0 || len(f) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseHex parses a pointer or stream as RMM prints it: hex with or without
// "0x", or glibc's "(nil)" for null.
func parseHex(f []byte) (uint64, bool) {
	if string(f) == "(nil)" {
		return 0, true
	}
	if len(f) > 2 && f[0] == '0' && (f[1] == 'x' || f[1] == 'X') {
		f = f[2:]
	}
	if len(f) == 0 || len(f) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range f {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// SourceRMM is the header Source of traces imported from RMM logs.
const SourceRMM = "rmm-log"

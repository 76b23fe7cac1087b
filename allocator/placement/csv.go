package placement

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The CSV format is minimalloc's: a header naming the columns, then one
// buffer a line.
//
//	id,lower,upper,size[,alignment][,offset]
//
// minimalloc's older names are read too: buffer or buffer_id for id, start
// or begin for lower, and end for an inclusive upper (end 5 is upper 6).
// An offset column, which minimalloc and WriteCSV write, is returned
// beside the buffers. minimalloc's gaps column is refused: this solver
// places each buffer over its whole lifetime.

// CSVError is bad CSV input, with where it is.
type CSVError struct {
	File   string // "" for an unnamed stream
	Line   int    // 1-based
	Column string // the column's name, or "" for the whole line
	Msg    string
}

func (e *CSVError) Error() string {
	f := e.File
	if f == "" {
		f = "<input>"
	}
	s := fmt.Sprintf("%s:%d: ", f, e.Line)
	if e.Column != "" {
		s += "column " + e.Column + ": "
	}
	return s + e.Msg
}

// column names after the aliases are resolved.
const (
	colID = iota
	colLower
	colUpper
	colEnd // inclusive upper
	colSize
	colAlignment
	colOffset
	numCols
)

var colNames = map[string]int{
	"id": colID, "buffer": colID, "buffer_id": colID,
	"lower": colLower, "start": colLower, "begin": colLower,
	"upper": colUpper, "end": colEnd,
	"size": colSize, "alignment": colAlignment, "offset": colOffset,
}

// MaxCSVLine is the longest line ReadCSV reads: a buffer's line is an id
// and up to five integers, so a longer one is not a placement CSV line.
// encoding/csv has no bound of its own: a file without a newline (or
// /dev/zero) grew one line until memory ran out.
const MaxCSVLine = 64 << 10

// lineBound passes its reader's bytes through until a line (the bytes
// since the last newline) runs past max bytes; the read then fails with a
// *lineTooLong naming that line.
type lineBound struct {
	r    io.Reader
	max  int
	run  int // bytes of the current line so far
	line int // 1-based number of the current line
}

type lineTooLong struct{ line, max int }

func (e *lineTooLong) Error() string {
	return fmt.Sprintf("line longer than %d bytes: not a placement CSV line", e.max)
}

func (b *lineBound) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for i, c := range p[:n] {
		if c == '\n' {
			b.run = 0
			b.line++
			continue
		}
		if b.run++; b.run > b.max {
			return i, &lineTooLong{line: b.line, max: b.max}
		}
	}
	return n, err
}

// ReadCSV reads a problem; offsets is nil unless the file has an offset
// column. Every buffer passes CheckBuffer and the ids are distinct; name
// is the file's name for errors. A line longer than MaxCSVLine is an
// error.
func ReadCSV(r io.Reader, name string) (bufs []Buffer, offsets []uint64, err error) {
	cr := csv.NewReader(&lineBound{r: r, max: MaxCSVLine, line: 1})
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	fail := func(line int, col, format string, args ...any) error {
		return &CSVError{File: name, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
	}
	header, err := cr.Read()
	if err == io.EOF {
		return nil, nil, fail(1, "", "empty file: want a header such as id,lower,upper,size")
	}
	if err != nil {
		return nil, nil, csvReadError(name, err)
	}
	where := [numCols]int{-1, -1, -1, -1, -1, -1, -1}
	heads := make([]string, len(header))
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		heads[i] = h
		c, ok := colNames[h]
		switch {
		case h == "gaps":
			return nil, nil, fail(1, h, "gaps are not supported: each buffer is placed over its whole lifetime")
		case !ok:
			return nil, nil, fail(1, h, "unknown column (want id, lower, upper, size, and optionally alignment and offset)")
		case where[c] >= 0 || (c == colUpper && where[colEnd] >= 0) || (c == colEnd && where[colUpper] >= 0):
			return nil, nil, fail(1, h, "named twice")
		}
		where[c] = i
	}
	for _, need := range []struct {
		c    []int
		name string
	}{{[]int{colID}, "id"}, {[]int{colLower}, "lower"}, {[]int{colUpper, colEnd}, "upper"}, {[]int{colSize}, "size"}} {
		if where[need.c[0]] < 0 && (len(need.c) == 1 || where[need.c[1]] < 0) {
			return nil, nil, fail(1, "", "the header has no %s column (want id,lower,upper,size)", need.name)
		}
	}
	upperCol := where[colUpper]
	if upperCol < 0 {
		upperCol = where[colEnd]
	}
	seen := map[string]int{}
	var lines []int
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, csvReadError(name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(heads) {
			return nil, nil, fail(line, "", "%d fields, the header has %d", len(rec), len(heads))
		}
		field := func(c int) string { return strings.TrimSpace(rec[where[c]]) }
		var b Buffer
		b.ID = field(colID)
		if j, dup := seen[b.ID]; dup {
			return nil, nil, fail(line, heads[where[colID]], "duplicate id %q (also on line %d)", b.ID, j)
		}
		seen[b.ID] = line
		if b.Lower, err = strconv.ParseInt(field(colLower), 10, 64); err != nil {
			return nil, nil, fail(line, heads[where[colLower]], "%q is not an integer", field(colLower))
		}
		up := strings.TrimSpace(rec[upperCol])
		if b.Upper, err = strconv.ParseInt(up, 10, 64); err != nil {
			return nil, nil, fail(line, heads[upperCol], "%q is not an integer", up)
		}
		if where[colEnd] >= 0 {
			if b.Upper == math.MaxInt64 {
				return nil, nil, fail(line, heads[upperCol], "%d is too large", b.Upper)
			}
			b.Upper++
		}
		uint := func(c int) (uint64, error) {
			v, err := strconv.ParseUint(field(c), 10, 64)
			if err != nil {
				return 0, fail(line, heads[where[c]], "%q is not a non-negative integer", field(c))
			}
			return v, nil
		}
		if b.Size, err = uint(colSize); err != nil {
			return nil, nil, err
		}
		if where[colAlignment] >= 0 {
			if b.Alignment, err = uint(colAlignment); err != nil {
				return nil, nil, err
			}
		}
		if msg := CheckBuffer(b); msg != "" {
			col := heads[where[colSize]]
			switch {
			case b.Upper <= b.Lower:
				col = heads[upperCol]
			case b.Size != 0 && b.Size <= MaxTotal:
				col = heads[where[colAlignment]]
			}
			return nil, nil, fail(line, col, "%s", msg)
		}
		if where[colOffset] >= 0 {
			o, err := uint(colOffset)
			if err != nil {
				return nil, nil, err
			}
			offsets = append(offsets, o)
		}
		bufs = append(bufs, b)
		lines = append(lines, line)
	}
	if err := Check(bufs); err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			return nil, nil, fail(lines[ie.Index], heads[where[colSize]], "%s", ie.Msg)
		}
		return nil, nil, err
	}
	if where[colOffset] >= 0 && offsets == nil {
		offsets = []uint64{}
	}
	return bufs, offsets, nil
}

// csvReadError turns encoding/csv's error into a CSVError.
func csvReadError(name string, err error) error {
	var long *lineTooLong
	if errors.As(err, &long) {
		return &CSVError{File: name, Line: long.line, Msg: long.Error()}
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &CSVError{File: name, Line: pe.Line, Msg: fmt.Sprintf("byte %d of the line: %v", pe.Column, pe.Err)}
	}
	return &CSVError{File: name, Line: 0, Msg: err.Error()}
}

// WriteCSV writes bufs in ReadCSV's format, with an alignment column when
// a buffer has one above 1 and an offset column when offsets is not nil.
func WriteCSV(w io.Writer, bufs []Buffer, offsets []uint64) error {
	if offsets != nil && len(offsets) != len(bufs) {
		return fmt.Errorf("%d offsets for %d buffers", len(offsets), len(bufs))
	}
	aligned := false
	for _, b := range bufs {
		aligned = aligned || b.Alignment > 1
	}
	cw := csv.NewWriter(w)
	rec := []string{"id", "lower", "upper", "size"}
	if aligned {
		rec = append(rec, "alignment")
	}
	if offsets != nil {
		rec = append(rec, "offset")
	}
	if err := cw.Write(rec); err != nil {
		return err
	}
	for i, b := range bufs {
		rec = append(rec[:0], b.ID, strconv.FormatInt(b.Lower, 10), strconv.FormatInt(b.Upper, 10),
			strconv.FormatUint(b.Size, 10))
		if aligned {
			rec = append(rec, strconv.FormatUint(max(b.Alignment, 1), 10))
		}
		if offsets != nil {
			rec = append(rec, strconv.FormatUint(offsets[i], 10))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

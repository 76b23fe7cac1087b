package trace

// A safe reader for plain-data pickles (PyTorch memory snapshots).
//
// Python's pickle format is a small stack machine: each opcode pushes a
// value, pops values into a container, or saves/recalls a value in the
// "memo" (a table that lets one object appear many times, and is how the
// snapshot's shared strings, frame dicts and frame lists are written once).
// Python's own unpickler also has opcodes that import any global and call
// it (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ...), which is
// why loading an untrusted pickle runs arbitrary code. This machine has no
// such opcodes at all: it accepts only the ones that build dicts, lists,
// tuples, str, bytes, int, float, bool and None (section 5.3 of
// ../shared/docs/pytorch-caching-allocator.md, plus POP, POP_MARK, DUP and
// the two short bytes opcodes), and refuses every other byte with an error
// naming the opcode and its offset. Nothing is looked up by name, so there
// is nothing to allow-list.
//
// Representation. A snapshot is millions of small dicts, lists and ints
// that all live until the end of decoding. As Go interface values (a
// boxed int64 per address, an `any` pair per dict item) the import spent
// most of its time allocating and in the garbage collector's write
// barriers and marking. So a decoded value is a pv: a uint64 with a kind
// in its top 4 bits and a payload below. None, bools and ints that fit in
// 60 bits are the payload itself; other numbers, strings, lists, dicts and
// tuples are an index into the arenas of the pickled result. The stack,
// the memo and the containers' items are slices of pv, which hold no Go
// pointers, so the GC never scans them; containers are allocated in
// chunks, and their item slices are carved from shared slabs.
//
// Identity is kept: a memo back-reference yields the same list or dict
// index, so the importer caches its conversion of a shared frame list or
// frame dict on the object (the tag fields) and converts it once. A dict
// keeps its items in insertion order, in a slice, rather than in a Go map:
// snapshot dicts have at most a dozen string keys. A repeated key is kept
// as a second item; readers walk the items in order so the later value
// wins, as in Python.
//
// Integers wider than 64 bits are refused: PyTorch writes addresses,
// sizes, streams and times as int64 (the C++ pickler as an 8-byte LONG1);
// an unsigned 64-bit value needs a 9-byte LONG1 in two's complement and is
// kept as a uint64.
//
// Input. A file is read through a window the opcode loop refills (more),
// so a snapshot of a gigabyte is never held whole; an input already in
// memory is one window. While a snapshot is decoded, its trace entries
// can be streamed to the importer and freed (stream.go).
//
// Against hostile input: every declared length (strings, bytes, LONG4,
// FRAME) is checked against what is left of the input (the file's size,
// taken when it was opened) before anything is allocated, so memory stays
// proportional to the input;
// open MARKs are capped (real pickles nest a handful deep); pops never
// cross the innermost MARK (Python's C unpickler's "stack underflow"
// rule); a memo index must have been stored before it is read. The object
// graph itself can still be deep or cyclic without any MARK (a list
// appended to itself through the memo), and shared objects make a small
// graph expand into an exponentially large tree, so code that walks values
// recursively must carry its own depth and size limits (see toGo); the
// importer walks only the fixed shape of a snapshot, caches what is shared
// and counts what it produces against the input size. No input panics:
// every failure is a *FormatError with the file name and the byte offset
// of the opcode.

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
)

// pv is a decoded Python value (see the file comment).
type pv uint64

type pvKind uint8

const (
	pkNone  pvKind = iota
	pkBool         // payload 0 or 1
	pkInt          // payload: the int64 in 60-bit two's complement
	pkWide         // payload: index in words of an int64 beyond 60 bits
	pkUint         // payload: index in words of a uint64 >= 2^63
	pkFloat        // payload: index in words of the float64's bits
	pkStr          // payload: index in strs
	pkBytes        // payload: index in bytes
	pkList         // payload: index in lists
	pkTuple        // payload: index in lists (a tuple is never changed)
	pkDict         // payload: index in dicts
	// Kinds that exist only while a snapshot is streamed (stream.go): what
	// is left of an object after the importer consumed it.
	pkEntry // payload: serial of a trace entry already converted to an event
	pkStack // payload: the StackID a frame list was converted to
	pkFrame // payload: the frame index a frame dict was converted to
	pkDead  // a consumed object nothing may refer to again
)

const (
	pvKindShift = 60
	pvPayload   = 1<<pvKindShift - 1
)

func mkpv(k pvKind, payload uint64) pv { return pv(uint64(k)<<pvKindShift | payload) }

func (v pv) kind() pvKind     { return pvKind(v >> pvKindShift) }
func (v pv) payload() uint64  { return uint64(v) & pvPayload }
func (v pv) inlineInt() int64 { return int64(uint64(v)<<(64-pvKindShift)) >> (64 - pvKindShift) }

var pvNone = mkpv(pkNone, 0)

// typeName is the Python type name, for messages.
func (v pv) typeName() string {
	switch v.kind() {
	case pkNone:
		return "NoneType"
	case pkBool:
		return "bool"
	case pkInt, pkWide, pkUint:
		return "int"
	case pkFloat:
		return "float"
	case pkStr:
		return "str"
	case pkBytes:
		return "bytes"
	case pkList:
		return "list"
	case pkTuple:
		return "tuple"
	case pkDict, pkEntry, pkFrame:
		return "dict"
	case pkStack:
		return "list"
	}
	return "?"
}

// pyList is a Python list or tuple.
type pyList struct {
	items []pv
	// tag is the importer's cache for this object: StackID+1 once the list
	// was converted as a frame list, 0 before.
	tag uint32
	// trace is, for a device's trace list whose entries are streamed
	// (stream.go), its index in streamState.traces plus one; 0 otherwise.
	trace uint32
}

// pyDict is a Python dict: items in insertion order (see the file comment
// about repeated keys).
type pyDict struct {
	items []pyItem
	// tag is the importer's cache: frame index+1 once the dict was
	// converted as a stack frame, 0 before.
	tag uint32
}

type pyItem struct{ key, val pv }

// pyArena hands out elements that never move: chunks are allocated whole
// and never grown, so a pointer to an element stays valid.
type pyArena[T any] struct {
	chunks [][]T
	n      int
}

const pyArenaShift = 10

func (a *pyArena[T]) alloc() (int, *T) {
	if a.n>>pyArenaShift == len(a.chunks) {
		a.chunks = append(a.chunks, make([]T, 1<<pyArenaShift))
	}
	i := a.n
	a.n++
	p := &a.chunks[i>>pyArenaShift][i&(1<<pyArenaShift-1)]
	var zero T
	*p = zero // a slot freed by truncate is handed out again
	return i, p
}

// truncate frees every element from n on, for reuse; the caller
// guarantees nothing refers to them any more. The chunks stay allocated.
func (a *pyArena[T]) truncate(n int) { a.n = n }

func (a *pyArena[T]) at(i uint64) *T { return &a.chunks[i>>pyArenaShift][i&(1<<pyArenaShift-1)] }

// pickled is a decoded pickle: the root value and the arenas its handles
// index.
type pickled struct {
	root  pv
	words []uint64
	strs  []string
	bytes [][]byte
	lists pyArena[pyList]
	dicts pyArena[pyDict]
}

func (p *pickled) str(v pv) string           { return p.strs[v.payload()] }
func (p *pickled) list(v pv) *pyList         { return p.lists.at(v.payload()) }
func (p *pickled) dict(v pv) *pyDict         { return p.dicts.at(v.payload()) }
func (p *pickled) float(v pv) float64        { return math.Float64frombits(p.words[v.payload()]) }
func (p *pickled) bytesOf(v pv) []byte       { return p.bytes[v.payload()] }
func (p *pickled) isStr(v pv, s string) bool { return v.kind() == pkStr && p.strs[v.payload()] == s }

// int returns an int that fits in int64; ok is false for other kinds, and
// for uints beyond int64 (isUint is then true).
func (p *pickled) int(v pv) (n int64, ok, isUint bool) {
	switch v.kind() {
	case pkInt:
		return v.inlineInt(), true, false
	case pkWide:
		return int64(p.words[v.payload()]), true, false
	case pkUint:
		return 0, false, true
	}
	return 0, false, false
}

// bits returns the 64 bits of any int: int64 two's complement, or the
// uint64.
func (p *pickled) bits(v pv) (uint64, bool) {
	switch v.kind() {
	case pkInt:
		return uint64(v.inlineInt()), true
	case pkWide, pkUint:
		return p.words[v.payload()], true
	}
	return 0, false
}

// get returns the value of the last item whose key is the string k.
func (p *pickled) get(d *pyDict, k string) (pv, bool) {
	for i := len(d.items) - 1; i >= 0; i-- {
		if p.isStr(d.items[i].key, k) {
			return d.items[i].val, true
		}
	}
	return pvNone, false
}

// Limits against hostile input. Real snapshots nest about 6 deep.
const (
	maxPickleMarks = 1000
	// maxPickleStack bounds the value stack. The C++ pickler pushes a whole
	// list before one APPENDS, so a million-entry trace legitimately holds
	// a million values here; this is far above that.
	maxPickleStack = 1 << 28
)

// Opcodes (Lib/pickletools.py). Only the accepted ones and the ones
// refused by name need a constant; every other byte is "unknown".
const (
	opMARK             = '('
	opSTOP             = '.'
	opPOP              = '0'
	opPOP_MARK         = '1'
	opDUP              = '2'
	opBININT           = 'J'
	opBININT1          = 'K'
	opBININT2          = 'M'
	opNONE             = 'N'
	opBINUNICODE       = 'X'
	opAPPEND           = 'a'
	opEMPTY_DICT       = '}'
	opAPPENDS          = 'e'
	opBINGET           = 'h'
	opLONG_BINGET      = 'j'
	opEMPTY_LIST       = ']'
	opBINPUT           = 'q'
	opLONG_BINPUT      = 'r'
	opSETITEM          = 's'
	opTUPLE            = 't'
	opEMPTY_TUPLE      = ')'
	opSETITEMS         = 'u'
	opBINFLOAT         = 'G'
	opBINBYTES         = 'B'
	opSHORT_BINBYTES   = 'C'
	opPROTO            = 0x80
	opTUPLE1           = 0x85
	opTUPLE2           = 0x86
	opTUPLE3           = 0x87
	opNEWTRUE          = 0x88
	opNEWFALSE         = 0x89
	opLONG1            = 0x8a
	opLONG4            = 0x8b
	opSHORT_BINUNICODE = 0x8c
	opBINUNICODE8      = 0x8d
	opMEMOIZE          = 0x94
	opFRAME            = 0x95
)

// pickleOpNames names every opcode Python knows, for error messages.
var pickleOpNames = map[byte]string{
	'(': "MARK", '.': "STOP", '0': "POP", '1': "POP_MARK", '2': "DUP",
	'F': "FLOAT", 'I': "INT", 'J': "BININT", 'K': "BININT1", 'L': "LONG",
	'M': "BININT2", 'N': "NONE", 'P': "PERSID", 'Q': "BINPERSID",
	'R': "REDUCE", 'S': "STRING", 'T': "BINSTRING", 'U': "SHORT_BINSTRING",
	'V': "UNICODE", 'X': "BINUNICODE", 'a': "APPEND", 'b': "BUILD",
	'c': "GLOBAL", 'd': "DICT", '}': "EMPTY_DICT", 'e': "APPENDS", 'g': "GET",
	'h': "BINGET", 'i': "INST", 'j': "LONG_BINGET", 'l': "LIST",
	']': "EMPTY_LIST", 'o': "OBJ", 'p': "PUT", 'q': "BINPUT",
	'r': "LONG_BINPUT", 's': "SETITEM", 't': "TUPLE", ')': "EMPTY_TUPLE",
	'u': "SETITEMS", 'G': "BINFLOAT", 'B': "BINBYTES", 'C': "SHORT_BINBYTES",
	0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
	0x85: "TUPLE1", 0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE",
	0x89: "NEWFALSE", 0x8a: "LONG1", 0x8b: "LONG4",
	0x8c: "SHORT_BINUNICODE", 0x8d: "BINUNICODE8", 0x8e: "BINBYTES8",
	0x8f: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
	0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8",
	0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}

// pickleRefusedWhy explains the refusal of the opcodes that import, call
// or build objects, the ones a hostile pickle uses.
var pickleRefusedWhy = map[byte]string{
	'c': "imports a global", 0x93: "imports a global", 'i': "imports and calls a class",
	'R': "calls an object", 'b': "calls __setstate__", 'o': "calls a class",
	0x81: "calls cls.__new__", 0x92: "calls cls.__new__",
	0x82: "imports from the extension registry", 0x83: "imports from the extension registry",
	0x84: "imports from the extension registry",
	'P':  "asks for a persistent object", 'Q': "asks for a persistent object",
	0x97: "asks for an out-of-band buffer", 0x98: "modifies an out-of-band buffer",
}

func pickleOpName(op byte) string {
	if n, ok := pickleOpNames[op]; ok {
		return fmt.Sprintf("%s (0x%02x)", n, op)
	}
	return fmt.Sprintf("0x%02x", op)
}

// unpickler is one decoding run.
type unpickler struct {
	pickled
	file string
	// The input: data holds the input's bytes from byte offset base on.
	// An input in memory is one window (src nil, eof set); a file is read
	// through a window that the opcode loop refills as it reaches its end
	// (fill), so no more than a window and the longest string are held.
	data   []byte
	buf    []byte // data's backing array, full capacity
	base   int64
	size   int64 // the input's size: len(data) in memory, the file's size
	src    io.Reader
	eof    bool  // src has no more bytes (always set for inputs in memory)
	srcErr error // the read error that ended src, if not io.EOF
	stack  []pv
	marks  []int // stack lengths at each open MARK
	fence  int   // len(stack) at the innermost MARK; pops stop there
	// memo: indices 0..len(memo)-1 in a slice (every real pickler stores
	// them in order), any other index in sparse.
	memo      []pv
	sparse    map[uint64]pv
	memoCount int    // distinct indices stored: MEMOIZE's next index
	frameEnd  int64  // byte offset of the end of the current FRAME, 0 outside frames
	frameAt   int64  // byte offset of the current FRAME opcode (for frameCut)
	frameLen  uint64 // and the length it declared
	// Slabs the containers' first items are carved from.
	pvSlab   []pv
	itemSlab []pyItem
	// st streams a snapshot's trace entries (stream.go); nil decodes the
	// whole object graph.
	st *streamState
	// shortStrs caches the strs index+1 of short strings by a hash of
	// their bytes (see str).
	shortStrs [256]uint32
}

// str returns the strs index of a decoded string. A short string decoded
// again gets the index of the same string decoded earlier, when the cache
// still holds it: a str's identity means nothing in Python (only its
// value), and PyTorch's C++ pickler writes a string such as an entry's
// "N/A" compile context anew in every entry instead of through the memo,
// which made a Go string and a strs slot for each of them.
func (u *unpickler) str(b []byte) uint64 {
	if len(b) > maxCachedStr {
		u.strs = append(u.strs, string(b))
		return uint64(len(u.strs) - 1)
	}
	// The hash: the first and last 8 bytes (overlapping, or the bytes
	// themselves when fewer) and the length, multiplied to mix them into
	// the top byte.
	var x uint64
	if len(b) >= 8 {
		x = binary.LittleEndian.Uint64(b) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(b[len(b)-8:]), 29)
	} else {
		for _, c := range b {
			x = x<<8 | uint64(c)
		}
	}
	slot := &u.shortStrs[((x^uint64(len(b)))*0x9E3779B97F4A7C15)>>56]
	if i := *slot; i != 0 && u.strs[i-1] == string(b) {
		return uint64(i - 1)
	}
	u.strs = append(u.strs, string(b))
	*slot = uint32(len(u.strs))
	return uint64(len(u.strs) - 1)
}

// maxCachedStr is the longest string str looks up: hashing a long string
// costs more than copying it.
const maxCachedStr = 16

// pickleWindow is the read size of a streamed input (a variable for the
// tests, which shrink it to refill at every opcode). 64 KiB: a refill
// costs a read and a copy of the lookahead, while the window is allocated
// and cleared for every file; at 1 MiB that was an eighth of the bytes
// the real-snapshot corpus allocated, for no faster a decode.
var pickleWindow = 64 << 10

// pickleLookahead is what the opcode loop keeps in the window before an
// opcode: every fixed-size opcode fits.
const pickleLookahead = 16

// unpickle decodes one pickle from data, building the whole object graph.
// Bytes after STOP are ignored, as pickle.load does.
func unpickle(data []byte, file string) (*pickled, error) {
	u := newMemUnpickler(data, file)
	root, err := u.run()
	if err != nil {
		return nil, err
	}
	u.root = root
	return &u.pickled, nil
}

func newMemUnpickler(data []byte, file string) *unpickler {
	return &unpickler{file: file, data: data, buf: data, size: int64(len(data)), eof: true, memo: memoFor(int64(len(data)))}
}

// memoFor sizes the memo for an input of size bytes: about one memo
// entry in 32 bytes (PyTorch's snapshots have one in 17 to 60), at most a
// million (8 MB) ahead of need. Grown by append from nothing, the memo
// was copied about twice over: a tenth of the bytes the real-snapshot
// corpus allocated.
func memoFor(size int64) []pv {
	if size < 64 {
		return nil
	}
	return make([]pv, 0, min(size/32, 1<<20))
}

// newFileUnpickler reads size bytes (the file's size when opened; -1: not
// known, a pipe) from src through a window.
func newFileUnpickler(src io.Reader, size int64, file string) *unpickler {
	w := pickleWindow
	if size >= 0 && size < int64(w) {
		w = int(size) + 1 // a small file in one read, without a whole window to clear
	}
	buf := make([]byte, 0, w)
	return &unpickler{file: file, data: buf, buf: buf, size: size, src: src, memo: memoFor(size)}
}

// more keeps the window's bytes from from on, moves them to its start,
// and reads until n bytes follow pos or the input ends. It returns from
// and pos in the new window (from is then 0). The caller checks n against
// what is left of the input (left) first, so a declared length cannot
// make it allocate beyond the input's size.
func (u *unpickler) more(from, pos, n int) (int, int) {
	if u.eof {
		return from, pos
	}
	keep := len(u.data) - from
	need := pos - from + n
	if cap(u.buf) < need {
		nb := make([]byte, keep, max(need, 2*cap(u.buf)))
		copy(nb, u.data[from:])
		u.buf = nb
	} else {
		copy(u.buf[:keep], u.data[from:])
	}
	u.base += int64(from)
	u.data = u.buf[:keep]
	pos -= from
	for len(u.data)-pos < n && !u.eof {
		m, err := u.src.Read(u.buf[len(u.data):cap(u.buf)])
		u.data = u.buf[:len(u.data)+m]
		if u.size < 0 && u.st != nil && u.st.c != nil {
			// Of unknown size, the input's budget of objects (newPTConv)
			// grows with the bytes that came.
			u.st.c.budget += m
		}
		if err != nil {
			u.eof = true
			if err != io.EOF {
				u.srcErr = err
			}
		}
	}
	return 0, pos
}

// left is what the input holds from window position pos on. An input of
// unknown size (a pipe, size -1) may hold any length: sized reads it as
// it comes.
func (u *unpickler) left(pos int) int64 {
	if u.size < 0 {
		return math.MaxInt64
	}
	return u.size - u.base - int64(pos)
}

func (u *unpickler) errf(off int, format string, args ...any) *FormatError {
	return &FormatError{File: u.file, Offset: u.base + int64(off), Event: -1, Msg: fmt.Sprintf(format, args...)}
}

func (u *unpickler) truncated(off int, op byte, need, left int) *FormatError {
	if e := u.frameCut(); e != nil {
		return e
	}
	return u.errf(off, "truncated: %s needs %d more bytes, %d left", pickleOpName(op), need, left)
}

// frameCut is, for an input of unknown size (a pipe) that ended inside
// the current FRAME, the error a file's size gives at the FRAME opcode
// itself, so that a pipe and a file cut at the same byte read the same;
// nil otherwise.
func (u *unpickler) frameCut() *FormatError {
	end := u.base + int64(len(u.data))
	if u.size >= 0 || !u.eof || u.frameEnd <= end {
		return nil
	}
	payload := u.frameAt + 9 // the opcode and its 8-byte length
	return &FormatError{File: u.file, Offset: u.frameAt, Event: -1,
		Msg: fmt.Sprintf("truncated: FRAME declares %d bytes, %d left", u.frameLen, end-payload)}
}

func (u *unpickler) underflow(off int, op byte) *FormatError {
	if len(u.marks) > 0 {
		return u.errf(off, "%s: stack underflow (no value after the MARK at the stack top)", pickleOpName(op))
	}
	return u.errf(off, "%s: stack underflow", pickleOpName(op))
}

// endOfInput is the error when the input ends where an opcode should be.
func (u *unpickler) endOfInput(pos int) error {
	if u.srcErr != nil {
		return &FormatError{File: u.file, Offset: u.base + int64(pos), Event: -1, Msg: "reading", Err: u.srcErr}
	}
	if e := u.frameCut(); e != nil {
		return e
	}
	return u.errf(pos, "truncated: input ends before STOP")
}

// sized reads the n bytes a length-prefixed opcode at start declares,
// its payload starting at pos. ok is false, with the error, when the
// input has fewer. The slice is valid until the next call that reads.
func (u *unpickler) sized(start, pos int, op byte, n uint64) (b []byte, newStart, newPos int, err error) {
	if l := u.left(pos); u.size >= 0 && n > uint64(max(l, 0)) {
		return nil, start, pos, u.errf(start, "truncated: %s declares %d bytes, %d left", pickleOpName(op), n, l)
	}
	if uint64(len(u.data)-pos) < n {
		if u.size < 0 {
			// Nothing to check n against: the window grows by at most
			// its own size a read, so memory follows the bytes that
			// come, not the length declared.
			for uint64(len(u.data)-pos) < n && !u.eof {
				want := min(n, uint64(len(u.data)-pos)+uint64(max(cap(u.buf), pickleWindow)))
				start, pos = u.more(start, pos, int(want))
			}
		} else {
			start, pos = u.more(start, pos, int(n))
		}
		if uint64(len(u.data)-pos) < n { // the file shrank, or a pipe ended
			if u.srcErr != nil {
				return nil, start, pos, &FormatError{File: u.file, Offset: u.base + int64(start), Event: -1, Msg: "reading", Err: u.srcErr}
			}
			if e := u.frameCut(); e != nil {
				return nil, start, pos, e
			}
			return nil, start, pos, u.errf(start, "truncated: %s declares %d bytes, %d left", pickleOpName(op), n, len(u.data)-pos)
		}
	}
	return u.data[pos : pos+int(n)], start, pos + int(n), nil
}

func (u *unpickler) memoPut(idx uint64, v pv) {
	switch n := uint64(len(u.memo)); {
	case idx < n:
		u.memo[idx] = v
		return
	case idx == n:
		u.memo = append(u.memo, v)
		if _, ok := u.sparse[idx]; ok {
			delete(u.sparse, idx)
			return // already counted
		}
	default:
		if u.sparse == nil {
			u.sparse = map[uint64]pv{}
		}
		_, had := u.sparse[idx]
		u.sparse[idx] = v
		if had {
			return
		}
	}
	u.memoCount++
}

func (u *unpickler) memoGet(idx uint64) (pv, bool) {
	if idx < uint64(len(u.memo)) {
		return u.memo[idx], true
	}
	v, ok := u.sparse[idx]
	return v, ok
}

// popMark removes the innermost MARK and returns the stack length it
// recorded.
func (u *unpickler) popMark() int {
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	u.fence = 0
	if len(u.marks) > 0 {
		u.fence = u.marks[len(u.marks)-1]
	}
	return m
}

// pushInt stores an int64 inline when it fits in 60 bits.
func (u *unpickler) pushInt(x int64) {
	if x >= -1<<(pvKindShift-1) && x < 1<<(pvKindShift-1) {
		u.stack = append(u.stack, mkpv(pkInt, uint64(x)&pvPayload))
		return
	}
	u.stack = append(u.stack, u.word(pkWide, uint64(x)))
}

func (u *unpickler) word(k pvKind, w uint64) pv {
	u.words = append(u.words, w)
	return mkpv(k, uint64(len(u.words)-1))
}

func (u *unpickler) newList(k pvKind, items []pv) pv {
	i, l := u.lists.alloc()
	l.items = items
	return mkpv(k, uint64(i))
}

// pvSlice returns an empty slice with room for n values. Its capacity is
// exactly n, so a later append reallocates instead of running into the
// next container's items.
func (u *unpickler) pvSlice(n int) []pv {
	if n > 256 {
		return make([]pv, 0, n)
	}
	if len(u.pvSlab) < n {
		u.pvSlab = make([]pv, 4096)
	}
	s := u.pvSlab[:0:n]
	u.pvSlab = u.pvSlab[n:]
	return s
}

func (u *unpickler) itemSlice(n int) []pyItem {
	if n > 256 {
		return make([]pyItem, 0, n)
	}
	if len(u.itemSlab) < n {
		u.itemSlab = make([]pyItem, 2048)
	}
	s := u.itemSlab[:0:n]
	u.itemSlab = u.itemSlab[n:]
	return s
}

// run decodes the pickle (ops). An input of unknown size (a pipe) that
// fails inside a FRAME is first read on towards the frame's declared end,
// at most pipeFrameLookahead bytes: one that ends inside the frame then
// fails as a file cut at the same byte does, truncated at the FRAME
// (frameCut), whatever its bytes before the cut made of the stack. A file
// knows its size at the FRAME; a pipe learns it only by reading, which
// only a failed decode can afford to do ahead of the opcodes.
func (u *unpickler) run() (pv, error) {
	v, err := u.ops()
	if err == nil || u.size >= 0 || u.srcErr != nil {
		return v, err
	}
	for start := u.base + int64(len(u.data)); !u.eof && u.base+int64(len(u.data)) < u.frameEnd &&
		u.base+int64(len(u.data))-start < pipeFrameLookahead; {
		u.more(len(u.data), len(u.data), int(min(u.frameEnd-u.base-int64(len(u.data)), int64(pickleWindow))))
	}
	if e := u.frameCut(); e != nil && u.srcErr == nil {
		return v, e
	}
	return v, err
}

// pipeFrameLookahead bounds how far a failed decode of a pipe reads on to
// find the end of its FRAME (run). Python's pickler closes a frame at
// 64 KiB, so only a hostile FRAME reaches the bound; past it the pipe's
// own error stands where a file would say "truncated".
const pipeFrameLookahead = 64 << 20

// ops runs the opcodes to STOP.
func (u *unpickler) ops() (pv, error) {
	data := u.data
	pos := 0
	for {
		if len(data)-pos < pickleLookahead && !u.eof {
			_, pos = u.more(pos, pos, pickleLookahead)
			data = u.data
		}
		if pos >= len(data) {
			return 0, u.endOfInput(pos)
		}
		start := pos
		op := data[pos]
		pos++
		switch op {
		case opBINGET, opLONG_BINGET:
			// Gets come in runs (a frame list is a get for each of its
			// frames, two thirds of a snapshot's opcodes): the run is
			// taken here, each get after the first without the loop's
			// refill check and dispatch, while the window holds the
			// lookahead the loop would have asked for.
			stack := u.stack
			for {
				var idx uint64
				if op == opBINGET {
					if pos >= len(data) {
						u.stack = stack
						return 0, u.truncated(start, op, 1, 0)
					}
					idx = uint64(data[pos])
					pos++
				} else {
					if len(data)-pos < 4 {
						u.stack = stack
						return 0, u.truncated(start, op, 4, len(data)-pos)
					}
					idx = uint64(binary.LittleEndian.Uint32(data[pos:]))
					pos += 4
				}
				v, ok := u.memoGet(idx)
				if !ok {
					u.stack = stack
					return 0, u.errf(start, "%s %d: memo index not stored", pickleOpName(op), idx)
				}
				if v.kind() == pkDead {
					u.stack = stack
					return 0, u.shapef(start, "%s %d refers to an object inside a trace entry already converted", pickleOpName(op), idx)
				}
				stack = append(stack, v)
				if len(data)-pos < pickleLookahead || len(stack) > maxPickleStack {
					break
				}
				if next := data[pos]; next != opBINGET && next != opLONG_BINGET {
					break
				}
				start, op = pos, data[pos]
				pos++
			}
			if cap(stack) == cap(u.stack) {
				// Not grown: only the length changed. Storing the
				// slice whole would store its pointer too, through the
				// collector's write barrier while it marks.
				u.stack = u.stack[:len(stack)]
			} else {
				u.stack = stack
			}

		case opSHORT_BINUNICODE, opBINUNICODE, opBINUNICODE8, opSHORT_BINBYTES, opBINBYTES:
			var n uint64
			var w int
			switch op {
			case opSHORT_BINUNICODE, opSHORT_BINBYTES:
				w = 1
			case opBINUNICODE, opBINBYTES:
				w = 4
			default:
				w = 8
			}
			if len(data)-pos < w {
				return 0, u.truncated(start, op, w, len(data)-pos)
			}
			switch w {
			case 1:
				n = uint64(data[pos])
			case 4:
				n = uint64(binary.LittleEndian.Uint32(data[pos:]))
			default:
				n = binary.LittleEndian.Uint64(data[pos:])
			}
			pos += w
			var b []byte
			var err error
			if n <= uint64(len(data)-pos) { // the usual case, inlined
				b = data[pos : pos+int(n)]
				pos += int(n)
			} else {
				if b, start, pos, err = u.sized(start, pos, op, n); err != nil {
					return 0, err
				}
				data = u.data
			}
			if op == opSHORT_BINBYTES || op == opBINBYTES {
				u.bytes = append(u.bytes, append([]byte{}, b...))
				u.stack = append(u.stack, mkpv(pkBytes, uint64(len(u.bytes)-1)))
			} else {
				u.stack = append(u.stack, mkpv(pkStr, u.str(b)))
			}

		case opMEMOIZE:
			if len(u.stack) <= u.fence {
				return 0, u.underflow(start, op)
			}
			v := u.stack[len(u.stack)-1]
			if u.sparse == nil && u.memoCount == len(u.memo) {
				u.memo = append(u.memo, v) // the usual case, inlined
				u.memoCount++
			} else {
				if u.st != nil && u.st.open {
					return 0, u.shapef(start, "%s to a sparse memo inside a trace entry", pickleOpName(op))
				}
				u.memoPut(uint64(u.memoCount), v)
			}

		case opBINPUT, opLONG_BINPUT:
			var idx uint64
			if op == opBINPUT {
				if len(data)-pos < 1 {
					return 0, u.truncated(start, op, 1, 0)
				}
				idx = uint64(data[pos])
				pos++
			} else {
				if len(data)-pos < 4 {
					return 0, u.truncated(start, op, 4, len(data)-pos)
				}
				idx = uint64(binary.LittleEndian.Uint32(data[pos:]))
				pos += 4
			}
			if len(u.stack) <= u.fence {
				return 0, u.underflow(start, op)
			}
			if u.st != nil && u.st.open && (idx != uint64(len(u.memo)) || u.sparse != nil) {
				return 0, u.shapef(start, "%s %d out of order inside a trace entry", pickleOpName(op), idx)
			}
			u.memoPut(idx, u.stack[len(u.stack)-1])

		case opBININT1:
			if len(data)-pos < 1 {
				return 0, u.truncated(start, op, 1, 0)
			}
			u.stack = append(u.stack, mkpv(pkInt, uint64(data[pos])))
			pos++
		case opBININT2:
			if len(data)-pos < 2 {
				return 0, u.truncated(start, op, 2, len(data)-pos)
			}
			u.stack = append(u.stack, mkpv(pkInt, uint64(binary.LittleEndian.Uint16(data[pos:]))))
			pos += 2
		case opBININT:
			if len(data)-pos < 4 {
				return 0, u.truncated(start, op, 4, len(data)-pos)
			}
			u.pushInt(int64(int32(binary.LittleEndian.Uint32(data[pos:]))))
			pos += 4
		case opLONG1, opLONG4:
			var n int
			if op == opLONG1 {
				if len(data)-pos < 1 {
					return 0, u.truncated(start, op, 1, 0)
				}
				n = int(data[pos])
				pos++
			} else {
				if len(data)-pos < 4 {
					return 0, u.truncated(start, op, 4, len(data)-pos)
				}
				n32 := int32(binary.LittleEndian.Uint32(data[pos:]))
				pos += 4
				if n32 < 0 {
					return 0, u.errf(start, "%s: negative byte count %d", pickleOpName(op), n32)
				}
				n = int(n32)
			}
			var b []byte
			if n <= len(data)-pos {
				b = data[pos : pos+n]
				pos += n
			} else {
				var err error
				if b, start, pos, err = u.sized(start, pos, op, uint64(n)); err != nil {
					return 0, err
				}
				data = u.data
			}
			x, unsigned, ok := decodeLong(b)
			if !ok {
				return 0, u.errf(start, "%s: integer of %d bytes does not fit in 64 bits", pickleOpName(op), n)
			}
			if unsigned {
				u.stack = append(u.stack, u.word(pkUint, x))
			} else {
				u.pushInt(int64(x))
			}
		case opBINFLOAT:
			if len(data)-pos < 8 {
				return 0, u.truncated(start, op, 8, len(data)-pos)
			}
			u.stack = append(u.stack, u.word(pkFloat, binary.BigEndian.Uint64(data[pos:])))
			pos += 8

		case opEMPTY_DICT:
			entry := -1
			if u.st != nil && len(u.st.traces) > 0 {
				var err error
				if entry, err = u.entryAt(start); err != nil {
					return 0, err
				}
			}
			i, _ := u.dicts.alloc()
			if entry >= 0 {
				u.openEntry(i, entry)
			}
			u.stack = append(u.stack, mkpv(pkDict, uint64(i)))
		case opEMPTY_LIST:
			v := u.newList(pkList, nil)
			if u.st != nil && !u.st.open {
				u.noteList(v)
			}
			u.stack = append(u.stack, v)
		case opEMPTY_TUPLE:
			u.stack = append(u.stack, u.newList(pkTuple, nil))
		case opNONE:
			u.stack = append(u.stack, pvNone)
		case opNEWTRUE:
			u.stack = append(u.stack, mkpv(pkBool, 1))
		case opNEWFALSE:
			u.stack = append(u.stack, mkpv(pkBool, 0))

		case opMARK:
			if len(u.marks) >= maxPickleMarks {
				return 0, u.errf(start, "MARK: more than %d open MARKs (nesting too deep)", maxPickleMarks)
			}
			u.marks = append(u.marks, len(u.stack))
			u.fence = len(u.stack)

		case opSETITEMS:
			if len(u.marks) == 0 {
				return 0, u.errf(start, "%s without a MARK", pickleOpName(op))
			}
			m := u.popMark()
			items := u.stack[m:]
			if len(items)%2 != 0 {
				return 0, u.errf(start, "%s: odd number of stack items (%d) for key/value pairs", pickleOpName(op), len(items))
			}
			if m-1 < u.fence {
				return 0, u.underflow(start, op)
			}
			t := u.stack[m-1]
			if u.st != nil {
				if err := u.checkTarget(start, op, t); err != nil {
					return 0, err
				}
			}
			if t.kind() != pkDict {
				return 0, u.errf(start, "%s: target is %s, not a dict", pickleOpName(op), t.typeName())
			}
			d := u.dicts.at(t.payload())
			if d.items == nil {
				d.items = u.itemSlice(len(items) / 2)
			}
			for i := 0; i < len(items); i += 2 {
				if k := items[i].kind(); k == pkList || k == pkDict || k >= pkEntry {
					if k >= pkEntry {
						return 0, u.shapef(start, "%s: a converted object as a key", pickleOpName(op))
					}
					return 0, u.errf(start, "%s: unhashable key of type %s", pickleOpName(op), items[i].typeName())
				}
				d.items = append(d.items, pyItem{items[i], items[i+1]})
			}
			u.stack = u.stack[:m]
		case opSETITEM:
			if len(u.stack)-2 <= u.fence {
				return 0, u.underflow(start, op)
			}
			n := len(u.stack)
			t, k := u.stack[n-3], u.stack[n-2]
			if u.st != nil {
				if err := u.checkTarget(start, op, t); err != nil {
					return 0, err
				}
			}
			if t.kind() != pkDict {
				return 0, u.errf(start, "%s: target is %s, not a dict", pickleOpName(op), t.typeName())
			}
			if kk := k.kind(); kk == pkList || kk == pkDict || kk >= pkEntry {
				if kk >= pkEntry {
					return 0, u.shapef(start, "%s: a converted object as a key", pickleOpName(op))
				}
				return 0, u.errf(start, "%s: unhashable key of type %s", pickleOpName(op), k.typeName())
			}
			d := u.dicts.at(t.payload())
			d.items = append(d.items, pyItem{k, u.stack[n-1]})
			u.stack = u.stack[:n-2]

		case opAPPENDS:
			if len(u.marks) == 0 {
				return 0, u.errf(start, "%s without a MARK", pickleOpName(op))
			}
			m := u.popMark()
			if m-1 < u.fence {
				return 0, u.underflow(start, op)
			}
			t := u.stack[m-1]
			if u.st != nil {
				if err := u.checkTarget(start, op, t); err != nil {
					return 0, err
				}
			}
			if t.kind() != pkList {
				return 0, u.errf(start, "%s: target is %s, not a list", pickleOpName(op), t.typeName())
			}
			l := u.lists.at(t.payload())
			if l.trace != 0 {
				if err := u.appendEntries(start, m, l); err != nil {
					return 0, err
				}
				u.stack = u.stack[:m]
				break
			}
			items := u.stack[m:]
			if l.items == nil {
				l.items = u.pvSlice(len(items))
			}
			l.items = append(l.items, items...)
			u.stack = u.stack[:m]
		case opAPPEND:
			if len(u.stack)-1 <= u.fence {
				return 0, u.underflow(start, op)
			}
			n := len(u.stack)
			t := u.stack[n-2]
			if u.st != nil {
				if err := u.checkTarget(start, op, t); err != nil {
					return 0, err
				}
			}
			if t.kind() != pkList {
				return 0, u.errf(start, "%s: target is %s, not a list", pickleOpName(op), t.typeName())
			}
			l := u.lists.at(t.payload())
			if l.trace != 0 {
				if err := u.appendEntries(start, n-1, l); err != nil {
					return 0, err
				}
				u.stack = u.stack[:n-1]
				break
			}
			l.items = append(l.items, u.stack[n-1])
			u.stack = u.stack[:n-1]

		case opTUPLE:
			if len(u.marks) == 0 {
				return 0, u.errf(start, "%s without a MARK", pickleOpName(op))
			}
			m := u.popMark()
			t := append(u.pvSlice(len(u.stack)-m), u.stack[m:]...)
			u.stack = append(u.stack[:m], u.newList(pkTuple, t))
		case opTUPLE1, opTUPLE2, opTUPLE3:
			k := int(op-opTUPLE1) + 1
			if len(u.stack)-k < u.fence {
				return 0, u.underflow(start, op)
			}
			n := len(u.stack)
			t := append(u.pvSlice(k), u.stack[n-k:]...)
			u.stack = append(u.stack[:n-k], u.newList(pkTuple, t))

		case opPOP:
			switch {
			case len(u.stack) > u.fence:
				u.stack = u.stack[:len(u.stack)-1]
			case len(u.marks) > 0:
				// Python's POP on an empty MARK pops the MARK.
				u.popMark()
			default:
				return 0, u.underflow(start, op)
			}
		case opPOP_MARK:
			if len(u.marks) == 0 {
				return 0, u.errf(start, "%s without a MARK", pickleOpName(op))
			}
			u.stack = u.stack[:u.popMark()]
		case opDUP:
			if len(u.stack) <= u.fence {
				return 0, u.underflow(start, op)
			}
			u.stack = append(u.stack, u.stack[len(u.stack)-1])

		case opPROTO:
			if len(data)-pos < 1 {
				return 0, u.truncated(start, op, 1, 0)
			}
			if v := data[pos]; v < 2 || v > 5 {
				return 0, u.errf(start, "PROTO %d: only protocols 2 to 5 are read", v)
			}
			pos++
		case opFRAME:
			// Framing only batches reads for Python's file reader; this
			// reader has its own window, so a FRAME is checked and
			// otherwise ignored.
			if len(data)-pos < 8 {
				return 0, u.truncated(start, op, 8, len(data)-pos)
			}
			n := binary.LittleEndian.Uint64(data[pos:])
			pos += 8
			if u.base+int64(start) < u.frameEnd {
				return 0, u.errf(start, "FRAME inside the previous frame (which ends at byte offset %d)", u.frameEnd)
			}
			if l := u.left(pos); u.size >= 0 && n > uint64(max(l, 0)) {
				return 0, u.errf(start, "truncated: FRAME declares %d bytes, %d left", n, l)
			}
			// A pipe's FRAME is checked when the pipe ends (frameCut); one
			// past any offset ends at the largest.
			u.frameEnd = u.base + int64(pos) + int64(min(n, uint64(math.MaxInt64-u.base-int64(pos))))
			u.frameAt, u.frameLen = u.base+int64(start), n

		case opSTOP:
			if len(u.stack) <= u.fence {
				return 0, u.underflow(start, op)
			}
			if len(u.marks) > 0 {
				return 0, u.errf(start, "STOP with %d unclosed MARK(s)", len(u.marks))
			}
			if len(u.stack) != 1 {
				return 0, u.errf(start, "STOP with %d values on the stack, want 1", len(u.stack))
			}
			if u.st != nil && u.st.open {
				return 0, u.shapef(start, "STOP inside a trace entry")
			}
			// A pipe's last FRAME is checked as a file's is at the
			// FRAME: its bytes must all be there.
			for u.size < 0 && !u.eof && u.base+int64(len(u.data)) < u.frameEnd {
				u.more(len(u.data), len(u.data), int(min(u.frameEnd-u.base-int64(len(u.data)), int64(pickleWindow))))
			}
			if e := u.frameCut(); e != nil {
				return 0, e
			}
			return u.stack[0], nil

		default:
			if why, ok := pickleRefusedWhy[op]; ok {
				return 0, u.errf(start, "refused opcode %s: it %s; a memory snapshot holds only plain data", pickleOpName(op), why)
			}
			if _, ok := pickleOpNames[op]; ok {
				return 0, u.errf(start, "unsupported opcode %s: not used by memory snapshots", pickleOpName(op))
			}
			return 0, u.errf(start, "unknown opcode %s", pickleOpName(op))
		}
		if len(u.stack) > maxPickleStack {
			return 0, u.errf(start, "more than %d values on the stack", maxPickleStack)
		}
	}
}

// decodeLong decodes a LONG1/LONG4 payload: little-endian two's complement
// of any length. The result is the 64 bits of an int64, or, with unsigned
// set, a uint64 in [2^63, 2^64) (an unsigned address needs 9 bytes: its
// top bit set and a zero sign byte). ok is false outside both ranges.
func decodeLong(b []byte) (x uint64, unsigned, ok bool) {
	n := len(b)
	if n == 0 {
		return 0, false, true
	}
	neg := b[n-1]&0x80 != 0
	if n <= 8 {
		for i := n - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		if neg {
			x |= ^uint64(0) << (8 * uint(n)) // sign-extend
		}
		return x, false, true
	}
	// Wider: every byte from the ninth on must be sign extension.
	ext := byte(0)
	if neg {
		ext = 0xff
	}
	for _, c := range b[8:] {
		if c != ext {
			return 0, false, false
		}
	}
	x = binary.LittleEndian.Uint64(b)
	switch {
	case !neg && x > math.MaxInt64:
		return x, true, true
	case neg && x <= math.MaxInt64:
		return 0, false, false // below -2^63
	}
	return x, false, true
}

// toGo converts a decoded value to plain Go values: nil, bool, int64,
// uint64, float64, string, []byte, map[string]any for dicts, []any for
// lists and tuples. It refuses structures deeper than maxDepth, which also
// stops on cycles, more than maxNodes values in all (a DAG of shared lists
// expands exponentially), and dicts with keys other than strings.
func (p *pickled) toGo(v pv, maxDepth, maxNodes int) (any, error) {
	w := pyGoWalker{p: p, nodes: maxNodes}
	return w.walk(v, maxDepth)
}

type pyGoWalker struct {
	p     *pickled
	nodes int
}

func (w *pyGoWalker) walk(v pv, depth int) (any, error) {
	if depth < 0 {
		return nil, fmt.Errorf("nested too deeply")
	}
	if w.nodes--; w.nodes < 0 {
		return nil, fmt.Errorf("too many values")
	}
	p := w.p
	switch v.kind() {
	case pkNone:
		return nil, nil
	case pkBool:
		return v.payload() != 0, nil
	case pkInt, pkWide:
		n, _, _ := p.int(v)
		return n, nil
	case pkUint:
		return p.words[v.payload()], nil
	case pkFloat:
		return p.float(v), nil
	case pkStr:
		return p.str(v), nil
	case pkBytes:
		return p.bytesOf(v), nil
	case pkList, pkTuple:
		items := p.list(v).items
		out := make([]any, len(items))
		for i, it := range items {
			g, err := w.walk(it, depth-1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = g
		}
		return out, nil
	case pkDict:
		d := p.dict(v)
		m := make(map[string]any, len(d.items))
		for _, it := range d.items {
			if it.key.kind() != pkStr {
				return nil, fmt.Errorf("dict key of type %s", it.key.typeName())
			}
			k := p.str(it.key)
			g, err := w.walk(it.val, depth-1)
			if err != nil {
				return nil, fmt.Errorf("[%s]: %w", strconv.Quote(k), err)
			}
			m[k] = g
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown kind %d", v.kind())
}

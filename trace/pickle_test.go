package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A test-only pickle writer, so that tests build snapshots of any shape
// without python. Values: nil, bool, int, int64, uint64, float64, string,
// pdict (ordered), plist, ptuple, *pshared (a list or dict written once
// and back-referenced after, as Python does for shared frame lists), and
// praw (opcodes spliced in as they are).
type (
	pdict []pkv
	pkv   struct {
		k string
		v any
	}
	plist   []any
	ptuple  []any
	pshared struct{ v any }
	praw    []byte
)

// pickleWriter writes protocol 4 as CPython's pickler does, or protocol 2
// as PyTorch's C++ pickler does (spec 5.3: always MARK...SETITEMS and
// MARK...APPENDS, BINUNICODE with BINPUT, LONG1 of exactly 8 bytes).
type pickleWriter struct {
	buf    []byte
	cpp    bool
	strs   map[string]int
	shared map[*pshared]int
	n      int // memo entries so far
}

func newPickleWriter(cpp bool) *pickleWriter {
	w := &pickleWriter{cpp: cpp, strs: map[string]int{}, shared: map[*pshared]int{}}
	if cpp {
		w.buf = append(w.buf, opPROTO, 2)
	} else {
		w.buf = append(w.buf, opPROTO, 4)
	}
	return w
}

func encodePickle(v any, cpp bool) []byte {
	w := newPickleWriter(cpp)
	w.value(v)
	return w.finish()
}

func (w *pickleWriter) finish() []byte { return append(w.buf, opSTOP) }

func (w *pickleWriter) op(b ...byte) { w.buf = append(w.buf, b...) }

func (w *pickleWriter) put() {
	switch {
	case !w.cpp:
		w.op(opMEMOIZE)
	case w.n < 256:
		w.op(opBINPUT, byte(w.n))
	default:
		w.op(opLONG_BINPUT)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(w.n))
	}
	w.n++
}

func (w *pickleWriter) get(i int) {
	if i < 256 {
		w.op(opBINGET, byte(i))
		return
	}
	w.op(opLONG_BINGET)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(i))
}

func (w *pickleWriter) int(v int64) {
	switch {
	case v >= 0 && v < 256:
		w.op(opBININT1, byte(v))
	case v >= 0 && v < 65536:
		w.op(opBININT2)
		w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		w.op(opBININT)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(int32(v)))
	case w.cpp:
		w.op(opLONG1, 8)
		w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(v))
	default: // Python's encode_long: the fewest bytes of two's complement
		n := 1
		for n < 8 && (v >= 1<<(8*n-1) || v < -(1<<(8*n-1))) {
			n++
		}
		w.op(opLONG1, byte(n))
		for i := 0; i < n; i++ {
			w.op(byte(v >> (8 * i)))
		}
	}
}

func (w *pickleWriter) value(v any) {
	switch x := v.(type) {
	case nil:
		w.op(opNONE)
	case bool:
		if x {
			w.op(opNEWTRUE)
		} else {
			w.op(opNEWFALSE)
		}
	case int:
		w.int(int64(x))
	case int64:
		w.int(x)
	case uint64:
		if x <= math.MaxInt64 {
			w.int(int64(x))
			return
		}
		w.op(opLONG1, 9)
		w.buf = binary.LittleEndian.AppendUint64(w.buf, x)
		w.op(0)
	case float64:
		w.op(opBINFLOAT)
		w.buf = binary.BigEndian.AppendUint64(w.buf, math.Float64bits(x))
	case string:
		if i, ok := w.strs[x]; ok {
			w.get(i)
			return
		}
		if len(x) < 256 && !w.cpp {
			w.op(opSHORT_BINUNICODE, byte(len(x)))
		} else {
			w.op(opBINUNICODE)
			w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(x)))
		}
		w.buf = append(w.buf, x...)
		w.strs[x] = w.n
		w.put()
	case praw:
		w.buf = append(w.buf, x...)
	case *pshared:
		if i, ok := w.shared[x]; ok {
			w.get(i)
			return
		}
		w.shared[x] = w.n // the container's own memo entry comes first
		w.value(x.v)
	case plist:
		w.op(opEMPTY_LIST)
		w.put()
		w.batches(len(x), func(i int) { w.value(x[i]) }, opAPPEND, opAPPENDS)
	case pdict:
		w.op(opEMPTY_DICT)
		w.put()
		w.batches(len(x), func(i int) { w.value(x[i].k); w.value(x[i].v) }, opSETITEM, opSETITEMS)
	case ptuple:
		switch len(x) {
		case 0:
			w.op(opEMPTY_TUPLE)
			return
		case 1, 2, 3:
			for _, e := range x {
				w.value(e)
			}
			w.op(opTUPLE1 + byte(len(x)-1))
		default:
			w.op(opMARK)
			for _, e := range x {
				w.value(e)
			}
			w.op(opTUPLE)
		}
		if !w.cpp {
			w.put()
		}
	default:
		panic(fmt.Sprintf("pickleWriter: %T", v))
	}
}

// batches writes n items the way each pickler does: CPython in batches of
// 1000 with a lone item as APPEND/SETITEM, the C++ pickler as one batch.
func (w *pickleWriter) batches(n int, item func(int), one, many byte) {
	if w.cpp {
		w.op(opMARK)
		for i := 0; i < n; i++ {
			item(i)
		}
		w.op(many)
		return
	}
	for s := 0; s < n; s += 1000 {
		e := min(s+1000, n)
		if e-s == 1 {
			item(s)
			w.op(one)
			continue
		}
		w.op(opMARK)
		for i := s; i < e; i++ {
			item(i)
		}
		w.op(many)
	}
}

func mustUnpickle(t *testing.T, data []byte) *pickled {
	t.Helper()
	p, err := unpickle(data, "test.pickle")
	require.NoError(t, err)
	return p
}

func mustPyGo(t *testing.T, data []byte) any {
	t.Helper()
	p := mustUnpickle(t, data)
	g, err := p.toGo(p.root, 100, 1<<20)
	require.NoError(t, err)
	return g
}

const anyPickleOffset = -2

// pickleFormatErr asserts err is a *FormatError at the offset (unless anyPickleOffset),
// naming the file.
func pickleFormatErr(t *testing.T, err error, offset int64, contains ...string) *FormatError {
	t.Helper()
	require.Error(t, err)
	var fe *FormatError
	require.True(t, errors.As(err, &fe), "%T is not *FormatError: %v", err, err)
	assert.Equal(t, "test.pickle", fe.File)
	if offset != anyPickleOffset {
		assert.Equal(t, offset, fe.Offset, "offset in %q", err.Error())
	}
	for _, s := range contains {
		assert.Contains(t, err.Error(), s)
	}
	return fe
}

func proto4(body ...byte) []byte { return append([]byte{opPROTO, 4}, body...) }

func TestUnpickleValues(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want any
	}{
		{"none", proto4(opNONE, opSTOP), nil},
		{"true", proto4(opNEWTRUE, opSTOP), true},
		{"false", proto4(opNEWFALSE, opSTOP), false},
		{"binint1", proto4(opBININT1, 200, opSTOP), int64(200)},
		{"binint2", proto4(opBININT2, 0x34, 0x12, opSTOP), int64(0x1234)},
		{"binint negative", proto4(opBININT, 0xfe, 0xff, 0xff, 0xff, opSTOP), int64(-2)},
		{"long1 empty", proto4(opLONG1, 0, opSTOP), int64(0)},
		{"long1 6 bytes", proto4(opLONG1, 6, 0x00, 0x10, 0x00, 0x80, 0x28, 0x7f, opSTOP), int64(0x7f2880001000)},
		{"long1 negative", proto4(opLONG1, 2, 0x00, 0x80, opSTOP), int64(-32768)},
		{"long4", proto4(cat([]byte{opLONG4}, u32(3), []byte{1, 0, 0, opSTOP})...), int64(1)},
		{"binfloat", proto4(opBINFLOAT, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, opSTOP), 1.5},
		{"short_binunicode", proto4(opSHORT_BINUNICODE, 3, 'a', 'b', 'c', opSTOP), "abc"},
		{"binunicode", proto4(cat([]byte{opBINUNICODE}, u32(2), []byte("hé"[:2]), []byte{opSTOP})...), "h\xc3"},
		{"binunicode8", proto4(cat([]byte{opBINUNICODE8}, u64(1), []byte{'x', opSTOP})...), "x"},
		{"short_binbytes", proto4(opSHORT_BINBYTES, 2, 0, 1, opSTOP), []byte{0, 1}},
		{"binbytes", proto4(cat([]byte{opBINBYTES}, u32(1), []byte{9, opSTOP})...), []byte{9}},
		{"empty containers", proto4(opEMPTY_LIST, opEMPTY_DICT, opEMPTY_TUPLE, opTUPLE3, opSTOP),
			[]any{[]any{}, map[string]any{}, []any{}}},
		{"tuple1 tuple2", proto4(opBININT1, 1, opTUPLE1, opBININT1, 2, opBININT1, 3, opTUPLE2, opTUPLE2, opSTOP),
			[]any{[]any{int64(1)}, []any{int64(2), int64(3)}}},
		{"mark tuple", proto4(opMARK, opBININT1, 1, opBININT1, 2, opBININT1, 3, opBININT1, 4, opTUPLE, opSTOP),
			[]any{int64(1), int64(2), int64(3), int64(4)}},
		{"append appends", proto4(opEMPTY_LIST, opBININT1, 1, opAPPEND, opMARK, opBININT1, 2, opNONE, opAPPENDS, opSTOP),
			[]any{int64(1), int64(2), nil}},
		{"setitem setitems", proto4(opEMPTY_DICT, opSHORT_BINUNICODE, 1, 'a', opBININT1, 1, opSETITEM,
			opMARK, opSHORT_BINUNICODE, 1, 'b', opNEWTRUE, opSHORT_BINUNICODE, 1, 'c', opNONE, opSETITEMS, opSTOP),
			map[string]any{"a": int64(1), "b": true, "c": nil}},
		{"repeated key: last wins", proto4(opEMPTY_DICT, opMARK, opSHORT_BINUNICODE, 1, 'a', opBININT1, 1,
			opSHORT_BINUNICODE, 1, 'a', opBININT1, 2, opSETITEMS, opSTOP), map[string]any{"a": int64(2)}},
		{"memo put get", proto4(opSHORT_BINUNICODE, 1, 'k', opBINPUT, 7, opPOP, opBINGET, 7, opSTOP), "k"},
		{"long memo", proto4(cat([]byte{opNEWTRUE, opLONG_BINPUT}, u32(70000), []byte{opPOP, opLONG_BINGET}, u32(70000), []byte{opSTOP})...), true},
		{"memoize counts distinct indices", proto4(opBININT1, 5, opMEMOIZE, opBININT1, 6, opMEMOIZE, opTUPLE2, opBINGET, 1, opTUPLE2, opSTOP),
			[]any{[]any{int64(5), int64(6)}, int64(6)}},
		{"frame", proto4(cat([]byte{opFRAME}, u64(2), []byte{opNONE, opSTOP})...), nil},
		{"pop_mark dup", proto4(opBININT1, 1, opDUP, opMARK, opNONE, opNONE, opPOP_MARK, opTUPLE2, opSTOP), []any{int64(1), int64(1)}},
		{"pop of an empty mark pops the mark", proto4(opBININT1, 1, opMARK, opPOP, opTUPLE1, opSTOP), []any{int64(1)}},
		{"protocol 2", []byte{opPROTO, 2, opNONE, opSTOP}, nil},
		{"protocol 5", []byte{opPROTO, 5, opNONE, opSTOP}, nil},
		{"no PROTO (protocol 1 style)", []byte{opNONE, opSTOP}, nil},
		{"bytes after STOP ignored", []byte{opNONE, opSTOP, 0xff, 0xff}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, mustPyGo(t, tc.in))
		})
	}
}

func TestDecodeLong(t *testing.T) {
	ff := func(n int) []byte { return []byte(strings.Repeat("\xff", n)) }
	zz := func(n int) []byte { return make([]byte, n) }
	cat := func(a, b []byte) []byte { return append(append([]byte{}, a...), b...) }
	for _, tc := range []struct {
		in   []byte
		want any // nil: refused
	}{
		{nil, int64(0)},
		{[]byte{0x7f}, int64(127)},
		{[]byte{0x80}, int64(-128)},
		{[]byte{0xff, 0x00}, int64(255)},
		{ff(1), int64(-1)},
		{cat(ff(7), []byte{0x7f}), int64(math.MaxInt64)},
		{cat(zz(7), []byte{0x80}), int64(math.MinInt64)},
		// An 8-byte LONG1 with the top bit set is negative: the C++
		// pickler's int64. The unsigned value needs a 9th, zero byte.
		{cat(zz(7), []byte{0x80, 0x00}), uint64(1 << 63)},
		{cat(ff(8), []byte{0x00}), uint64(math.MaxUint64)},
		{cat([]byte{0x01}, zz(9)), int64(1)},                     // padded
		{ff(12), int64(-1)},                                      // padded
		{cat(zz(7), []byte{0x80, 0xff}), int64(math.MinInt64)},   // padded
		{cat(zz(7), []byte{0x7f, 0xff}), nil},                    // -2^64 + 0x7f<<56: below int64
		{cat(zz(8), []byte{0x01}), nil},                          // 2^64
		{cat(cat(zz(8), []byte{0x00}), []byte{0x01, 0x00}), nil}, // 2^72
	} {
		x, unsigned, ok := decodeLong(tc.in)
		if tc.want == nil {
			assert.False(t, ok, "% x -> %x", tc.in, x)
			continue
		}
		assert.True(t, ok, "% x", tc.in)
		var got any = int64(x)
		if unsigned {
			got = x
		}
		assert.Equal(t, tc.want, got, "% x", tc.in)
	}
}

// A back-reference is the same object, and conversion caches rely on it.
func TestUnpickleMemoIdentity(t *testing.T) {
	p := mustUnpickle(t, proto4(opEMPTY_LIST, opEMPTY_LIST, opMEMOIZE, opMARK, opBINGET, 0, opBINGET, 0, opAPPENDS, opAPPEND, opSTOP))
	outer := p.list(p.root)
	require.Len(t, outer.items, 1)
	inner := outer.items[0]
	require.Equal(t, pkList, inner.kind())
	assert.Equal(t, []pv{inner, inner}, p.list(inner).items)
	// A cycle decodes; a recursive walk stops at its depth limit.
	_, err := p.toGo(p.root, 50, 1<<20)
	assert.ErrorContains(t, err, "nested too deeply")

	// Mutation after memoising is visible through the memo (APPENDS after
	// MEMOIZE, as every pickler writes lists).
	p = mustUnpickle(t, proto4(opEMPTY_LIST, opMEMOIZE, opMARK, opBININT1, 1, opBININT1, 2, opAPPENDS, opPOP, opBINGET, 0, opSTOP))
	assert.Len(t, p.list(p.root).items, 2)

	// A slab-carved item slice grown by a later APPEND does not run into
	// the next list's items.
	p = mustUnpickle(t, proto4(opEMPTY_LIST, opMEMOIZE, opMARK, opBININT1, 1, opAPPENDS,
		opEMPTY_LIST, opMEMOIZE, opMARK, opBININT1, 2, opAPPENDS, opTUPLE2,
		opBINGET, 0, opBININT1, 3, opAPPEND, opPOP, opSTOP))
	g, err := p.toGo(p.root, 10, 100)
	require.NoError(t, err)
	assert.Equal(t, []any{[]any{int64(1), int64(3)}, []any{int64(2)}}, g)
}

func TestUnpickleRefusesCode(t *testing.T) {
	// The classic: pickle.dumps of an object whose __reduce__ returns
	// (os.system, ("echo pwned",)), at protocols 0, 2 and 4.
	for _, tc := range []struct {
		in     string
		offset int64
		op     string
	}{
		{"cposix\nsystem\np0\n(Vecho pwned\np1\ntp2\nRp3\n.", 0, "GLOBAL (0x63)"},
		{"\x80\x02cposix\nsystem\nq\x00X\n\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.", 2, "GLOBAL (0x63)"},
		{"\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\necho pwned\x94\x85\x94R\x94.", 28, "STACK_GLOBAL (0x93)"},
	} {
		_, err := unpickle([]byte(tc.in), "test.pickle")
		pickleFormatErr(t, err, tc.offset, "refused opcode "+tc.op)
	}
	// Every opcode that imports, calls or builds is refused by name where
	// it stands, whatever follows it.
	for op, name := range pickleOpNames {
		if _, bad := pickleRefusedWhy[op]; !bad {
			continue
		}
		_, err := unpickle(proto4(opNONE, op, 'x', '\n', 'y', '\n', opSTOP), "test.pickle")
		pickleFormatErr(t, err, 3, "refused opcode "+name)
	}
	// Opcodes Python knows but snapshots never use, and bytes that are no
	// opcode at all.
	for _, op := range []byte{'F', 'I', 'L', 'S', 'T', 'U', 'V', 'd', 'l', 'g', 'p', 0x8e, 0x8f, 0x90, 0x91, 0x96} {
		_, err := unpickle(proto4(op, '1', '\n', opSTOP), "test.pickle")
		pickleFormatErr(t, err, 2, "unsupported opcode "+pickleOpNames[op])
	}
	for _, op := range []byte{0x00, 'A', 0x7f, 0x99, 0xff} {
		_, err := unpickle(proto4(opNONE, op, opSTOP), "test.pickle")
		pickleFormatErr(t, err, 3, fmt.Sprintf("unknown opcode 0x%02x", op))
	}
}

func TestUnpickleMalformed(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	with := func(op byte, arg []byte, rest ...byte) []byte {
		return append(append(proto4(op), arg...), rest...)
	}
	for _, tc := range []struct {
		name   string
		in     []byte
		offset int64
		msg    string
	}{
		{"empty", nil, 0, "truncated: input ends before STOP"},
		{"no STOP", proto4(opNONE), 3, "truncated: input ends before STOP"},
		{"proto 1", []byte{opPROTO, 1, opNONE, opSTOP}, 0, "PROTO 1"},
		{"proto 6", []byte{opPROTO, 6, opNONE, opSTOP}, 0, "PROTO 6"},
		{"huge BINUNICODE8", with(opBINUNICODE8, u64(1<<63), 'a', opSTOP), 2, "truncated: BINUNICODE8 (0x8d) declares 9223372036854775808 bytes, 2 left"},
		{"huge BINUNICODE", with(opBINUNICODE, u32(0xffffffff), opSTOP), 2, "declares 4294967295 bytes, 1 left"},
		{"huge BINBYTES", with(opBINBYTES, u32(0x7fffffff)), 2, "truncated"},
		{"huge LONG4", with(opLONG4, u32(0x7fffffff), 0, opSTOP), 2, "truncated: LONG4"},
		{"negative LONG4", with(opLONG4, u32(0xffffffff), opSTOP), 2, "negative byte count"},
		{"LONG1 too wide", with(opLONG1, []byte{9, 0, 0, 0, 0, 0, 0, 0, 0, 1}, opSTOP), 2, "does not fit in 64 bits"},
		{"huge FRAME", with(opFRAME, u64(1<<62), opNONE, opSTOP), 2, "truncated: FRAME declares"},
		{"FRAME in FRAME", with(opFRAME, u64(9), append([]byte{opFRAME}, u64(1)...)...), 11, "FRAME inside the previous frame"},
		{"BINGET unset", proto4(opBINGET, 3, opSTOP), 2, "BINGET (0x68) 3: memo index not stored"},
		{"LONG_BINGET unset", with(opLONG_BINGET, u32(1<<31), opSTOP), 2, "memo index not stored"},
		{"MEMOIZE empty stack", proto4(opMEMOIZE, opSTOP), 2, "stack underflow"},
		{"MEMOIZE across MARK", proto4(opNONE, opMARK, opMEMOIZE), 4, "stack underflow"},
		{"APPEND to nothing", proto4(opNONE, opAPPEND, opSTOP), 3, "stack underflow"},
		{"APPEND to int", proto4(opBININT1, 1, opNONE, opAPPEND, opSTOP), 5, "target is int, not a list"},
		{"APPENDS without MARK", proto4(opEMPTY_LIST, opAPPENDS, opSTOP), 3, "APPENDS (0x65) without a MARK"},
		{"APPENDS on nothing", proto4(opMARK, opNONE, opAPPENDS, opSTOP), 4, "stack underflow"},
		{"APPENDS on dict", proto4(opEMPTY_DICT, opMARK, opNONE, opAPPENDS, opSTOP), 5, "target is dict, not a list"},
		{"SETITEMS odd", proto4(opEMPTY_DICT, opMARK, opNONE, opSETITEMS, opSTOP), 5, "odd number"},
		{"SETITEMS without MARK", proto4(opEMPTY_DICT, opSETITEMS, opSTOP), 3, "without a MARK"},
		{"SETITEMS on list", proto4(opEMPTY_LIST, opMARK, opNONE, opNONE, opSETITEMS, opSTOP), 6, "not a dict"},
		{"SETITEM unhashable key", proto4(opEMPTY_DICT, opEMPTY_LIST, opNONE, opSETITEM, opSTOP), 5, "unhashable key of type list"},
		{"SETITEMS unhashable key", proto4(opEMPTY_DICT, opMARK, opEMPTY_DICT, opNONE, opSETITEMS, opSTOP), 6, "unhashable key of type dict"},
		{"SETITEM short", proto4(opEMPTY_DICT, opNONE, opSETITEM, opSTOP), 4, "stack underflow"},
		{"TUPLE without MARK", proto4(opNONE, opTUPLE, opSTOP), 3, "without a MARK"},
		{"TUPLE2 across MARK", proto4(opNONE, opMARK, opNONE, opTUPLE2, opSTOP), 5, "stack underflow"},
		{"TUPLE3 short", proto4(opNONE, opNONE, opTUPLE3, opSTOP), 4, "stack underflow"},
		{"POP empty", proto4(opPOP, opSTOP), 2, "stack underflow"},
		{"POP_MARK without MARK", proto4(opPOP_MARK, opSTOP), 2, "without a MARK"},
		{"DUP empty", proto4(opDUP, opSTOP), 2, "stack underflow"},
		{"STOP empty", proto4(opSTOP), 2, "stack underflow"},
		{"STOP with an open MARK", proto4(opNONE, opMARK, opNONE, opSTOP), 5, "unclosed MARK"},
		{"STOP with two values", proto4(opNONE, opNONE, opSTOP), 4, "2 values on the stack"},
		{"truncated BININT", proto4(opBININT, 1, 2), 2, "truncated: BININT (0x4a) needs 4 more bytes, 2 left"},
		{"truncated BINFLOAT", proto4(opBINFLOAT, 1), 2, "truncated: BINFLOAT"},
		{"truncated SHORT_BINUNICODE", proto4(opSHORT_BINUNICODE, 5, 'a'), 2, "declares 5 bytes, 1 left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unpickle(tc.in, "test.pickle")
			pickleFormatErr(t, err, tc.offset, tc.msg)
		})
	}
}

func TestUnpickleDeepNesting(t *testing.T) {
	// Nested MARKs are capped.
	deep := proto4()
	for range maxPickleMarks + 1 {
		deep = append(deep, opEMPTY_LIST, opMARK)
	}
	_, err := unpickle(deep, "test.pickle")
	pickleFormatErr(t, err, int64(2+2*maxPickleMarks+1), "more than 1000 open MARKs")

	// Without MARKs (APPEND only) the graph nests as deep as the stack is
	// tall: it decodes, and recursive walkers stop at their own limit.
	var b []byte
	b = append(b, opPROTO, 4)
	const depth = 100000
	for range depth {
		b = append(b, opEMPTY_LIST)
	}
	for range depth - 1 {
		b = append(b, opAPPEND)
	}
	b = append(b, opSTOP)
	p := mustUnpickle(t, b)
	_, err = p.toGo(p.root, 1000, 1<<20)
	assert.ErrorContains(t, err, "nested too deeply")
}

// smallPTSnapshot is a complete little snapshot in both picklers' styles.
func smallPTSnapshot() any {
	fr := &pshared{plist{
		pdict{{"name", "malloc"}, {"filename", "alloc.cpp"}, {"line", 12}},
		pdict{{"name", "forward"}, {"filename", "/m/model.py"}, {"line", 245}},
	}}
	return pdict{
		{"segments", plist{pdict{
			{"device", 0}, {"address", int64(0x7f0000000000)}, {"total_size", 2097152},
			{"allocated_size", 512}, {"active_size", 512}, {"requested_size", 500},
			{"stream", 0}, {"segment_type", "small"}, {"segment_pool_id", ptuple{0, 0}},
			{"is_expandable", false}, {"frames", fr},
			{"blocks", plist{
				pdict{{"address", int64(0x7f0000000000)}, {"size", 512}, {"requested_size", 500}, {"state", "active_allocated"}, {"frames", fr}},
				pdict{{"address", int64(0x7f0000000200)}, {"size", 2096640}, {"requested_size", 0}, {"state", "inactive"}, {"frames", plist{}}},
			}},
		}}},
		{"device_traces", plist{plist{
			pdict{{"action", "segment_alloc"}, {"addr", int64(0x7f0000000000)}, {"size", 2097152}, {"stream", 0}, {"time_us", int64(1772688692031317)}, {"frames", fr}},
			pdict{{"action", "alloc"}, {"addr", int64(0x7f0000000000)}, {"size", 500}, {"stream", 0}, {"time_us", int64(1772688692031318)}, {"frames", fr}},
		}}},
		{"allocator_settings", pdict{
			{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", -1}, {"garbage_collection_threshold", 0.0},
			{"expandable_segments", false}, {"roundup_power2_divisions", pdict{{"1", 0}, {"2", 4}}},
		}},
	}
}

func TestUnpickleTruncatedEverywhere(t *testing.T) {
	for _, cpp := range []bool{false, true} {
		data := encodePickle(smallPTSnapshot(), cpp)
		for n := 0; n < len(data); n++ {
			_, err := unpickle(data[:n], "test.pickle")
			fe := pickleFormatErr(t, err, anyPickleOffset)
			assert.Contains(t, fe.Msg, "truncated", "prefix %d", n)
			assert.True(t, fe.Offset >= 0 && fe.Offset <= int64(n), "prefix %d: offset %d", n, fe.Offset)
			if t.Failed() {
				t.Fatalf("prefix %d of %d (cpp %v): %v", n, len(data), cpp, err)
			}
		}
		mustUnpickle(t, data)
	}
}

func TestUnpickleTruncatedRealFile(t *testing.T) {
	data, err := os.ReadFile(testdataSnapshot)
	require.NoError(t, err)
	for n := 0; n < len(data); n += 97 {
		_, err := unpickle(data[:n], "test.pickle")
		var fe *FormatError
		require.True(t, errors.As(err, &fe), "prefix %d: %v", n, err)
		require.Contains(t, fe.Msg, "truncated", "prefix %d", n)
		require.True(t, fe.Offset >= 0 && fe.Offset <= int64(n), "prefix %d: offset %d", n, fe.Offset)
	}
}

// FuzzPickle: no input panics or hangs; an error is a *FormatError that
// points into the input; a value can be walked.
func FuzzPickle(f *testing.F) {
	f.Add(encodePickle(smallPTSnapshot(), false))
	f.Add(encodePickle(smallPTSnapshot(), true))
	f.Add(cppStylePickle())
	f.Add([]byte("\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\necho pwned\x94\x85\x94R\x94."))
	f.Add(proto4(opEMPTY_LIST, opMEMOIZE, opBINGET, 0, opAPPEND, opSTOP))
	if data, err := os.ReadFile(testdataSnapshot); err == nil {
		f.Add(data[:4096])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := unpickle(data, "fuzz")
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%T is not *FormatError: %v", err, err)
			}
			if fe.File != "fuzz" || fe.Offset < 0 || fe.Offset > int64(len(data)) || fe.Event != -1 {
				t.Fatalf("bad error position: %+v", fe)
			}
			return
		}
		_, _ = p.toGo(p.root, 64, 1<<16)
	})
}

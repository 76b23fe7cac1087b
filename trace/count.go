package trace

// Counting a snapshot's trace entries without importing it.
//
// A replay that overlaps the import of a snapshot (sim/replay's
// speculative replay) must know the number of events before its first:
// the profiler spaces its timeline by it. The import knows it only at
// the end. CountPyTorchEntries reads the pickle once more, quickly, on a
// goroutine of its own: a stack machine that keeps of each value only
// what kind it is (a dict, a list, device_traces' key string, the
// device_traces list, a trace list, anything else), and counts the dicts
// appended to the trace lists, which are the entries. It recognises
// device_traces as the importer's streaming does (stream.go): a list
// pushed right after the key "device_traces"; a trace list is a list
// pushed onto it or into its MARK batch.
//
// The count is a guess the caller checks: a layout it does not follow (an
// opcode outside the few PyTorch's picklers write, an entry referred to
// through the memo twice, a second "device_traces" key somewhere) gives
// ok false or a number the import will not confirm, and the caller then
// does without it. It never errs on bad input: the import reports that.

import (
	"encoding/binary"
	"io"
)

// Value kinds on the counting stack.
const (
	ckOther uint8 = iota
	ckDict
	ckList
	ckKeyDT // the string "device_traces"
	ckDT    // the device_traces list
	ckTrace // a device's trace list
)

// countWindow is how much of the file is read at a time.
const countWindow = 1 << 20

// countMaxMemo bounds the memo indices the counter keeps.
const countMaxMemo = 1 << 26

// CountPyTorchEntries counts the trace entries of the snapshot pickle r
// (see the file comment); ok is false when it cannot tell.
func CountPyTorchEntries(r io.Reader) (n int64, ok bool) {
	c := &entryCounter{r: r, buf: make([]byte, 0, countWindow)}
	return c.run()
}

type entryCounter struct {
	r       io.Reader
	buf     []byte
	pos     int
	eof     bool
	skip    int64 // bytes past the window still to skip
	stack   []uint8
	marks   []int
	memo    []uint8
	stopped bool // STOP ended a pickle of one value
}

// fill keeps at least want bytes after pos in the window, unless the
// input ends first; false when fewer are left.
func (c *entryCounter) fill(want int) bool {
	if len(c.buf)-c.pos >= want && c.skip == 0 {
		return true
	}
	rest := copy(c.buf[:cap(c.buf)], c.buf[c.pos:])
	c.buf, c.pos = c.buf[:rest], 0
	for c.skip > 0 && !c.eof {
		// A payload longer than the window: throw its bytes away.
		k := int(min(c.skip, int64(cap(c.buf))))
		m, err := io.ReadFull(c.r, c.buf[:k])
		c.skip -= int64(m)
		if err != nil {
			c.eof = true
		}
	}
	for len(c.buf) < want && !c.eof {
		m, err := c.r.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+m]
		if err != nil {
			c.eof = true
		}
	}
	return len(c.buf)-c.pos >= want
}

// payload skips n bytes of an opcode's argument; key says whether they
// were "device_traces".
func (c *entryCounter) payload(n uint64) (key, ok bool) {
	if n == 13 && c.fill(13) {
		key = string(c.buf[c.pos:c.pos+13]) == "device_traces"
	}
	if left := uint64(len(c.buf) - c.pos); n <= left {
		c.pos += int(n)
		return key, true
	}
	c.skip = int64(n - uint64(len(c.buf)-c.pos))
	c.pos = len(c.buf)
	if n > 1<<40 {
		return false, false
	}
	c.fill(0)
	return key, c.skip == 0
}

func (c *entryCounter) push(k uint8) { c.stack = append(c.stack, k) }

func (c *entryCounter) run() (int64, bool) {
	var n int64
	// The hot state in locals: buf and pos are c's, stored back around
	// every call that moves the window.
	buf, pos := c.buf, c.pos
	stack := c.stack
	memo := c.memo
	for {
		if len(buf)-pos < 16 {
			c.buf, c.pos = buf, pos
			if !c.fill(16) && c.pos >= len(c.buf) {
				return 0, false // no STOP
			}
			buf, pos = c.buf, c.pos
		}
		op := buf[pos]
		// The opcodes of nearly every byte of a snapshot, first (with
		// their arguments in the window: near the end of the input,
		// everything goes the checked way).
		hot := len(buf)-pos >= 16
		switch {
		case !hot:
		case op == opBINGET:
			i := int(buf[pos+1])
			pos += 2
			if i >= len(memo) {
				return 0, false
			}
			stack = append(stack, memo[i])
			continue
		case op == opBININT1:
			pos += 2
			stack = append(stack, ckOther)
			continue
		case op == opBININT2:
			pos += 3
			stack = append(stack, ckOther)
			continue
		case op == opBININT:
			pos += 5
			stack = append(stack, ckOther)
			continue
		case op == opBINPUT:
			i := int(buf[pos+1])
			pos += 2
			if len(stack) == 0 {
				return 0, false
			}
			for len(memo) <= i {
				memo = append(memo, ckOther)
			}
			memo[i] = memoKind(stack[len(stack)-1])
			continue
		case op == opMARK:
			pos++
			c.marks = append(c.marks, len(stack))
			continue
		case op == opEMPTY_DICT:
			pos++
			stack = append(stack, ckDict)
			continue
		case op == opSETITEMS:
			pos++
			if len(c.marks) == 0 {
				return 0, false
			}
			m := c.marks[len(c.marks)-1]
			c.marks = c.marks[:len(c.marks)-1]
			if m > len(stack) {
				return 0, false
			}
			stack = stack[:m]
			continue
		case op == opLONG1:
			m := int(buf[pos+1])
			pos += 2
			if len(buf)-pos >= m {
				pos += m
				stack = append(stack, ckOther)
				continue
			}
			pos -= 2
		}
		pos++
		need := 0 // fixed argument bytes
		switch op {
		case opBINGET, opBININT1, opBINPUT, 'U', opSHORT_BINUNICODE, opSHORT_BINBYTES, opLONG1, opPROTO:
			need = 1
		case opBININT2:
			need = 2
		case opLONG_BINGET, opBININT, opLONG_BINPUT, opBINUNICODE, opBINBYTES, 'T', opLONG4:
			need = 4
		case opBINFLOAT, opFRAME, opBINUNICODE8, 0x8e, 0x96: // BINBYTES8, BYTEARRAY8
			need = 8
		}
		if len(buf)-pos < need {
			return 0, false
		}
		arg := buf[pos : pos+need]
		pos += need
		c.buf, c.pos, c.stack, c.memo = buf, pos, stack, memo
		if !c.slow(op, arg, &n) {
			return n, c.stopped
		}
		buf, pos, stack, memo = c.buf, c.pos, c.stack, c.memo
	}
}

// memoKind is the kind the memo keeps of a value, which a BINGET pushes:
// a container referred to again is not one the import streams (an entry
// twice, a list shared), so it counts as anything else.
func memoKind(k uint8) uint8 {
	if k == ckDT || k == ckTrace || k == ckDict {
		return ckOther
	}
	return k
}

// slow runs the opcodes run leaves to it: false at STOP (c.stopped says
// whether the pickle ended as a snapshot does) or when the count is lost.
func (c *entryCounter) slow(op byte, arg []byte, n *int64) bool {
	switch op {
	case opPROTO, opFRAME:
	case opSTOP:
		c.stopped = len(c.stack) == 1 && len(c.marks) == 0
		return false
	case opEMPTY_LIST:
		k := ckList
		t := len(c.stack)
		switch {
		case t > 0 && c.stack[t-1] == ckKeyDT:
			k = ckDT
		case t > 0 && c.stack[t-1] == ckDT:
			k = ckTrace
		case len(c.marks) > 0 && c.marks[len(c.marks)-1] > 0 && c.stack[c.marks[len(c.marks)-1]-1] == ckDT:
			k = ckTrace
		}
		c.push(k)
	case opEMPTY_TUPLE, opNONE, opNEWTRUE, opNEWFALSE, opBINFLOAT, opBININT, opBININT1, opBININT2:
		c.push(ckOther)
	case opEMPTY_DICT:
		c.push(ckDict)
	case opMARK:
		c.marks = append(c.marks, len(c.stack))
	case opLONG1, opLONG4:
		var m uint64
		if op == opLONG1 {
			m = uint64(arg[0])
		} else {
			m = uint64(binary.LittleEndian.Uint32(arg))
		}
		if _, ok := c.payload(m); !ok {
			return false
		}
		c.push(ckOther)
	case opSHORT_BINUNICODE, opBINUNICODE, opBINUNICODE8, opSHORT_BINBYTES, opBINBYTES, 0x8e, 0x96, 'U', 'T':
		var m uint64
		switch len(arg) {
		case 1:
			m = uint64(arg[0])
		case 4:
			m = uint64(binary.LittleEndian.Uint32(arg))
		default:
			m = binary.LittleEndian.Uint64(arg)
		}
		key, ok := c.payload(m)
		if !ok {
			return false
		}
		if key && (op == opSHORT_BINUNICODE || op == opBINUNICODE || op == opBINUNICODE8) {
			c.push(ckKeyDT)
		} else {
			c.push(ckOther)
		}
	case opBINPUT, opLONG_BINPUT, opMEMOIZE:
		if len(c.stack) == 0 {
			return false
		}
		i := uint64(len(c.memo))
		switch op {
		case opBINPUT:
			i = uint64(arg[0])
		case opLONG_BINPUT:
			i = uint64(binary.LittleEndian.Uint32(arg))
		}
		if i >= countMaxMemo {
			return false
		}
		for uint64(len(c.memo)) <= i {
			c.memo = append(c.memo, ckOther)
		}
		c.memo[i] = memoKind(c.stack[len(c.stack)-1])
	case opBINGET, opLONG_BINGET:
		i := uint64(arg[0])
		if op == opLONG_BINGET {
			i = uint64(binary.LittleEndian.Uint32(arg))
		}
		if i >= uint64(len(c.memo)) {
			return false
		}
		c.push(c.memo[i])
	case opAPPEND:
		t := len(c.stack)
		if t < 2 || len(c.marks) > 0 && c.marks[len(c.marks)-1] > t-2 {
			return false
		}
		if c.stack[t-2] == ckTrace && c.stack[t-1] == ckDict {
			*n++
		}
		c.stack = c.stack[:t-1]
	case opAPPENDS, opSETITEMS, opTUPLE, opPOP_MARK:
		if len(c.marks) == 0 {
			return false
		}
		m := c.marks[len(c.marks)-1]
		c.marks = c.marks[:len(c.marks)-1]
		if m > len(c.stack) {
			return false
		}
		if op == opAPPENDS && m > 0 && c.stack[m-1] == ckTrace {
			for _, k := range c.stack[m:] {
				if k == ckDict {
					*n++
				}
			}
		}
		c.stack = c.stack[:m]
		if op == opTUPLE {
			c.push(ckOther)
		}
	case opSETITEM:
		if len(c.stack) < 3 {
			return false
		}
		c.stack = c.stack[:len(c.stack)-2]
	case opTUPLE1, opTUPLE2, opTUPLE3:
		k := int(op-opTUPLE1) + 1
		if len(c.stack) < k {
			return false
		}
		c.stack = append(c.stack[:len(c.stack)-k], ckOther)
	case opPOP:
		if len(c.stack) == 0 || len(c.marks) > 0 && c.marks[len(c.marks)-1] >= len(c.stack) {
			return false
		}
		c.stack = c.stack[:len(c.stack)-1]
	case opDUP:
		if len(c.stack) == 0 {
			return false
		}
		c.push(c.stack[len(c.stack)-1])
	default:
		return false
	}
	return true
}

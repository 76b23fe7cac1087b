package main

// Hostile inputs, end to end: each case writes a file made to break a
// reader (generated here, a few bytes to a few MB, nothing committed),
// runs a subcommand on it in this process and wants exit code 2 with one
// line on stderr that names the file and where in it the problem is (a
// byte offset, an event, a line), and no panic. The classes are those of
// docs/cli.md, "Hostile input": pickles that nest deeply, declare huge
// lengths, refer to the memo out of range or through cycles, or repeat a
// memoized object to multiply a small file; sizes, addresses and devices
// out of range; settings that are NaN or infinite; native traces whose
// records declare more than they hold; RMM and plan CSVs with endless
// lines; JSON parts that are not JSON. A case that exhausted memory or
// time would fail the test by the test's own timeout or the machine's
// memory, so each case also bounds what the process may do.

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// pk builds pickle bytes opcode by opcode (protocol 4, no framing).
type pk struct{ b bytes.Buffer }

func newPk() *pk { p := &pk{}; p.b.WriteString("\x80\x04"); return p }

func (p *pk) op(s string) *pk { p.b.WriteString(s); return p }

// str writes a SHORT_BINUNICODE (up to 255 bytes, any bytes at all).
func (p *pk) str(s string) *pk {
	p.b.WriteByte(0x8c)
	p.b.WriteByte(byte(len(s)))
	p.b.WriteString(s)
	return p
}

// i32 writes a BININT.
func (p *pk) i32(v int32) *pk {
	p.b.WriteByte('J')
	_ = binary.Write(&p.b, binary.LittleEndian, v)
	return p
}

// long writes a LONG1 of 8 bytes (an int64) or 9 (a value up to 2^64-1).
func (p *pk) long(v uint64, nine bool) *pk {
	n := byte(8)
	if nine {
		n = 9
	}
	p.b.WriteByte(0x8a)
	p.b.WriteByte(n)
	_ = binary.Write(&p.b, binary.LittleEndian, v)
	if nine {
		p.b.WriteByte(0)
	}
	return p
}

func (p *pk) float(v float64) *pk {
	p.b.WriteByte('G')
	_ = binary.Write(&p.b, binary.BigEndian, v)
	return p
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

func (p *pk) bytes() []byte { return append([]byte(nil), p.b.Bytes()...) }

// snapshotWith is a snapshot of one device whose one trace entry is an
// alloc with the given fields, each written by its function; segments and
// settings are written by theirs (nil: an empty list, none).
func snapshotWith(fields map[string]func(*pk), segments func(*pk), settings func(*pk)) []byte {
	p := newPk()
	p.op("}(").str("segments")
	if segments != nil {
		segments(p)
	} else {
		p.op("]")
	}
	p.str("device_traces").op("](](}(")
	for _, k := range []string{"action", "addr", "size", "stream", "time_us", "frames"} {
		p.str(k)
		switch f := fields[k]; {
		case f != nil:
			f(p)
		case k == "action":
			p.str("alloc")
		case k == "addr":
			p.i32(0x100000)
		case k == "size":
			p.i32(512)
		case k == "frames":
			p.op("](}(").str("filename").str("a.py").str("line").i32(1).str("name").str("f").op("ue")
		default:
			p.i32(1)
		}
	}
	p.op("uee")
	if settings != nil {
		p.str("allocator_settings")
		settings(p)
	}
	return p.op("u.").bytes()
}

// native is a native trace (version 2) whose decompressed body is body.
func native(t *testing.T, body []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("MRTRACE\x00\x02")
	w, err := zstd.NewWriter(&out)
	require.NoError(t, err)
	_, err = w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return out.Bytes()
}

func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

// ctl is a control record: tag, declared length, payload.
func ctl(tag byte, declared uint64, payload []byte) []byte {
	return append(append([]byte{tag}, uv(declared)...), payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestHostileInputs(t *testing.T) {
	hdr := ctl(0x80, 2, []byte("{}"))
	frameRec := ctl(0x81, 8, cat(uv(4), []byte("a.py"), uv(2), uv(1), []byte("f")))
	// An RMM log's header line.
	rmm := "Thread,Time,Action,Pointer,Size,Stream\n"

	cases := []struct {
		name string
		args []string // FILE is the generated file
		data func() []byte
		want string // in the one line of stderr, after the file's name
	}{
		// Pickles: the stack machine.
		{"pickle nested 100000 lists deep", []string{"inspect"}, func() []byte {
			return newPk().op(strings.Repeat("]", 100000) + strings.Repeat("a", 99999) + ".").bytes()
		}, "segments[0]: expected dict, got list"},
		{"pickle 100000 open MARKs", []string{"replay"}, func() []byte {
			return newPk().op(strings.Repeat("(", 100000) + ".").bytes()
		}, "byte offset 1002: MARK: more than 1000 open MARKs (nesting too deep)"},
		{"pickle BINUNICODE8 of 2^60 bytes", []string{"inspect"}, func() []byte {
			return newPk().op("\x8d\x00\x00\x00\x00\x00\x00\x00\x10abc.").bytes()
		}, "byte offset 2: truncated: BINUNICODE8 (0x8d) declares 1152921504606846976 bytes, 4 left"},
		{"pickle LONG4 of 2^31-1 bytes", []string{"inspect"}, func() []byte {
			return newPk().op("\x8b\xff\xff\xff\x7fabc.").bytes()
		}, "byte offset 2: truncated: LONG4 (0x8b) declares 2147483647 bytes, 4 left"},
		{"pickle FRAME of 2^62 bytes", []string{"replay"}, func() []byte {
			return newPk().op("\x95\x00\x00\x00\x00\x00\x00\x00\x40}.").bytes()
		}, "byte offset 2: truncated: FRAME declares 4611686018427387904 bytes, 2 left"},
		{"pickle memo index never stored", []string{"inspect"}, func() []byte {
			return newPk().op("}j\xff\xff\xff\xff.").bytes()
		}, "byte offset 3: LONG_BINGET (0x6a) 4294967295: memo index not stored"},
		{"pickle frames list that contains itself", []string{"replay"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"frames": func(p *pk) { p.op("]q\xc8h\xc8a") }}, nil, nil)
		}, "event 0: device_traces[0][0].frames[0]: expected dict, got list"},
		{"pickle imports a global", []string{"inspect"}, func() []byte {
			return newPk().str("os").str("system").op("\x93.").bytes()
		}, "byte offset 14: refused opcode STACK_GLOBAL (0x93): it imports a global"},
		{"pickle ends before STOP", []string{"inspect"}, func() []byte { return newPk().op("}(").bytes() }, "truncated: input ends before STOP"},
		// Pickles: the snapshot's values.
		{"negative size", []string{"replay"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"size": func(p *pk) { p.i32(-512) }}, nil, nil)
		}, "event 0: device_traces[0][0].size: negative size -512"},
		{"size of 2^64", []string{"replay"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"size": func(p *pk) { p.op("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01") }}, nil, nil)
		}, "LONG1 (0x8a): integer of 9 bytes does not fit in 64 bits"},
		{"size NaN", []string{"replay"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"size": func(p *pk) { p.float(nan()) }}, nil, nil)
		}, "event 0: device_traces[0][0].size: expected int, got float"},
		{"free before its alloc", []string{"replay", "--check"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"action": func(p *pk) { p.str("free_requested") }}, nil, nil)
		}, "event 0: free of unknown address 0x100000"},
		{"unknown action", []string{"replay"}, func() []byte {
			return snapshotWith(map[string]func(*pk){"action": func(p *pk) { p.str("explode") }}, nil, nil)
		}, `event 0: device_traces[0][0].action: unknown action "explode"`},
		{"max_split_size infinite", []string{"replay"}, func() []byte {
			return snapshotWith(nil, nil, func(p *pk) { p.op("}").str("max_split_size").float(inf()).op("s") })
		}, "allocator_settings.max_split_size: expected int, got float"},
		{"segment on device -1", []string{"replay"}, func() []byte {
			return snapshotWith(nil, func(p *pk) {
				p.op("](}(").str("device").i32(-1).str("address").i32(0x200000).str("total_size").i32(2 << 20).op("ue")
			}, nil)
		}, "segments[0].device: device -1 out of range"},
		{"segment on device 2^62", []string{"inspect"}, func() []byte {
			return snapshotWith(nil, func(p *pk) {
				p.op("](}(").str("device").long(1<<62, false).str("address").i32(0x200000).str("total_size").i32(2 << 20).op("ue")
			}, nil)
		}, "segments[0].device: device 4611686018427387904 out of range"},
		{"1025 devices in use, one memoized device trace", []string{"replay"}, func() []byte {
			p := newPk().op("}(").str("segments").op("]").str("device_traces").op("](](}(").
				str("action").str("alloc").str("addr").i32(0x100000).str("size").i32(512).
				str("stream").i32(0).str("time_us").i32(1).str("frames").op("]ue")
			p.op("r\x00\x00\x01\x00" + strings.Repeat("j\x00\x00\x01\x00", 1024) + "eu.")
			return p.bytes()
		}, "event 1024: device 1024: more than 1024 devices in use"},
		// Native traces.
		{"native stack of 2^31 frames", []string{"replay"}, func() []byte {
			payload := cat(uv(1<<31), bytes.Repeat(uv(0), 10))
			return native(t, cat(hdr, frameRec, ctl(0x82, uint64(len(payload)), payload), ctl(0x86, 1, uv(0))))
		}, "stack definition with 2147483648 frames in a 15-byte record"},
		{"native record of 2^62 bytes", []string{"inspect"}, func() []byte {
			return native(t, cat(hdr, ctl(0xc5, 1<<62, []byte("xx"))))
		}, "truncated: the body ends inside a record"},
		{"native header of 2^62 bytes", []string{"replay"}, func() []byte {
			return native(t, ctl(0x80, 1<<62, []byte("{}")))
		}, "record length 4611686018427387904 is over the 16777216-byte limit"},
		{"native initial state of 2^40 segments", []string{"replay"}, func() []byte {
			payload := cat([]byte{0}, uv(1<<40))
			return native(t, cat(hdr, ctl(0x83, uint64(len(payload)), payload), ctl(0x86, 1, uv(0))))
		}, "segment count 1099511627776 does not fit its 7-byte record"},
		{"native version 2^63", []string{"inspect"}, func() []byte {
			return cat([]byte("MRTRACE\x00"), uv(1<<63), []byte{0})
		}, "byte offset 8: unsupported version 9223372036854775808"},
		{"native corrupt body", []string{"replay"}, func() []byte {
			return append([]byte("MRTRACE\x00\x02"), bytes.Repeat([]byte{0xa5}, 1000)...)
		}, "byte offset 0: corrupt compressed body"},
		// RMM logs.
		{"RMM line of 1 MB", []string{"replay"}, func() []byte {
			return []byte(rmm + "1,08:00:00:000000,allocate,0x7f0000000000,512," + strings.Repeat("0", 1<<20) + "\n")
		}, "line 2: longer than 65536 bytes: not an RMM log line"},
		{"RMM pointer of 160 bits", []string{"inspect"}, func() []byte {
			return []byte(rmm + "1,08:00:00:000000,allocate,0x" + strings.Repeat("f", 40) + ",512,0x0\n")
		}, "line 2: bad pointer"},
		// Any trace command: not a trace.
		{"empty file", []string{"replay"}, func() []byte { return nil }, "byte offset 0: not a trace"},
		{"binary garbage", []string{"convert", "FILE", "OUT"}, func() []byte { return bytes.Repeat([]byte{0x1b, 0xff}, 4096) }, `byte offset 0: not a trace: expected a memreplay trace, a PyTorch memory snapshot pickle or an RMM log; starts with "\x1b\xff`},
		// Other inputs.
		{"plan CSV of one 1 MB line", []string{"plan"}, func() []byte { return bytes.Repeat([]byte("7"), 1<<20) }, ":1: line longer than 65536 bytes: not a placement CSV line"},
		{"par part that is not JSON", []string{"par", "--merge"}, func() []byte { return make([]byte, 1<<20) }, `byte offset 1: not a par shard: invalid character '\x00' looking for beginning of value`},
		{"memory_stats NaN", []string{"replay", "--expect-stats", "FILE", "TRACE"}, func() []byte { return []byte(`{"num_alloc_retries": NaN}`) }, "memory_stats: invalid character 'N'"},
	}
	dir := t.TempDir()
	valid := filepath.Join(dir, "valid.pickle")
	require.NoError(t, os.WriteFile(valid, snapshotWith(nil, nil, nil), 0o644))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			require.NoError(t, os.WriteFile(file, c.data(), 0o644))
			args := append([]string(nil), c.args...)
			hasFile := false
			for j, a := range args {
				switch a {
				case "FILE":
					args[j], hasFile = file, true
				case "OUT":
					args[j] = filepath.Join(dir, "out", string(rune('a'+i)))
				case "TRACE":
					args[j] = valid
				}
			}
			if !hasFile {
				args = append(args, file)
			}
			code, _, stderr := runCLI(args...)
			require.Equal(t, 2, code, stderr)
			require.NotContains(t, stderr, "panic")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.Contains(t, stderr, file+":")
			require.Contains(t, stderr, c.want)
		})
	}
}

// Counts that make a command allocate before it starts are bounded: each
// of these died at once with "fatal error: out of memory" (a crash, not
// exit 2).
func TestHostileCounts(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--trials", "1000000000"}, "memreplay demo: --trials 1000000000: want at most 1048576\n"},
		{[]string{"par", "--mixes", "1000000000000"}, "memreplay par: --mixes 1000000000000: want 1..16777216\n"},
		{[]string{"par", "--trials-per-worker", "1000000000"}, "memreplay par: --trials-per-worker 1000000000: want 1..65536\n"},
	} {
		code, _, stderr := runCLI(c.args...)
		require.Equal(t, 2, code, stderr)
		require.Equal(t, c.want, stderr)
	}
}

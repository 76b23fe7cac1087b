package trace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readRMMFile(t *testing.T, name string) (*Trace, error) {
	t.Helper()
	path := filepath.Join("testdata", name)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return ReadRMM(f, path)
}

// rmmTOD is a time of day in microseconds.
func rmmTOD(h, m, s, us int64) int64 { return ((h*60+m)*60+s)*1_000_000 + us }

func TestRMMBasic(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_basic.csv")
	require.NoError(t, err)
	assert.Equal(t, "rmm-log", tr.Header.Source)
	assert.Equal(t, filepath.Join("testdata", "rmm_basic.csv"), tr.Header.SourceFile)
	assert.Equal(t, []Device{{Index: 0}}, tr.Header.Devices)
	assert.NotEmpty(t, tr.Header.Notes)
	assert.Nil(t, tr.Initial)
	assert.False(t, tr.HasFinal)
	side := uint64(0x5613ab000460)
	want := []Event{
		{Action: ActionAlloc, Addr: 0x10012400000, Size: 1048576, TimeUS: rmmTOD(15, 47, 2, 841961)},
		{Action: ActionAlloc, Addr: 0x10012500000, Size: 256, Stream: side, TimeUS: rmmTOD(15, 47, 2, 841977)},
		{Action: ActionFreeRequested, Addr: 0x10012400000, Size: 1048576, TimeUS: rmmTOD(15, 47, 2, 842001)},
		{Action: ActionFreeCompleted, Addr: 0x10012400000, Size: 1048576, TimeUS: rmmTOD(15, 47, 2, 842001)},
		{Action: ActionOOM, Size: 1 << 40, Stream: 2, TimeUS: rmmTOD(15, 47, 3, 1)},
		{Action: ActionFreeRequested, Addr: 0x10012500000, Size: 256, Stream: side, TimeUS: rmmTOD(15, 47, 3, 10)},
		{Action: ActionFreeCompleted, Addr: 0x10012500000, Size: 256, Stream: side, TimeUS: rmmTOD(15, 47, 3, 10)},
	}
	assert.Equal(t, want, tr.Events)
}

// Older RMM (spdlog + fmt): CRLF line ends, "0x0" for null pointers and the
// default stream, and a short fraction.
func TestRMMFmtEra(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_fmt_era.csv")
	require.NoError(t, err)
	want := []Event{
		{Action: ActionAlloc, Addr: 0x30a000000, Size: 256, Stream: 2, TimeUS: rmmTOD(14, 21, 19, 998533)},
		{Action: ActionOOM, Size: 4 << 30, TimeUS: rmmTOD(14, 21, 20, 500000)},
		{Action: ActionFreeRequested, Addr: 0x30a000000, Size: 256, Stream: 2, TimeUS: rmmTOD(14, 21, 32, 661875)},
		{Action: ActionFreeCompleted, Addr: 0x30a000000, Size: 256, Stream: 2, TimeUS: rmmTOD(14, 21, 32, 661875)},
	}
	assert.Equal(t, want, tr.Events)
}

// Extra columns (in the header, or trailing on a line) are ignored, blank
// lines skipped, and the clock passing midnight moves to the next day.
func TestRMMExtraColumnsMidnight(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_extra_cols_midnight.csv")
	require.NoError(t, err)
	day := rmmTOD(24, 0, 0, 0)
	want := []Event{
		{Action: ActionAlloc, Addr: 0x7f0000000000, Size: 512, TimeUS: rmmTOD(23, 59, 59, 999000)},
		{Action: ActionAlloc, Addr: 0x7f0000000200, Size: 512, TimeUS: rmmTOD(23, 59, 59, 999900)},
		{Action: ActionFreeRequested, Addr: 0x7f0000000000, Size: 512, TimeUS: day + 100},
		{Action: ActionFreeCompleted, Addr: 0x7f0000000000, Size: 512, TimeUS: day + 100},
		{Action: ActionFreeRequested, Addr: 0x7f0000000200, Size: 512, TimeUS: day + rmmTOD(0, 0, 1, 0)},
		{Action: ActionFreeCompleted, Addr: 0x7f0000000200, Size: 512, TimeUS: day + rmmTOD(0, 0, 1, 0)},
	}
	assert.Equal(t, want, tr.Events)
}

// A log without its header line, with epoch-seconds times (an older RMM
// documentation example), "deallocate", a repeated header and an
// unparsable time (0).
func TestRMMHeaderlessEpoch(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_headerless_epoch.csv")
	require.NoError(t, err)
	s := uint64(0x7f8a38001020)
	want := []Event{
		{Action: ActionAlloc, Addr: 0x7f8a40000000, Size: 1024, Stream: s, TimeUS: 1634567890123456},
		{Action: ActionFreeRequested, Addr: 0x7f8a40000000, Size: 1024, Stream: s, TimeUS: 1634567890234567},
		{Action: ActionFreeCompleted, Addr: 0x7f8a40000000, Size: 1024, Stream: s, TimeUS: 1634567890234567},
		{Action: ActionAlloc, Addr: 0x7f8a40000400, Size: 2048},
	}
	assert.Equal(t, want, tr.Events)
	assert.Contains(t, strings.Join(tr.Header.Notes, "\n"), "no header line")
}

// RMM's Python layer names per-device logs "<name>.dev<N>".
func TestRMMDeviceFromName(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_log.dev3.csv")
	require.NoError(t, err)
	assert.Equal(t, []Device{{Index: 3}}, tr.Header.Devices)
	require.Len(t, tr.Events, 3)
	for _, e := range tr.Events {
		assert.Equal(t, int32(3), e.Device)
	}
	for name, dev := range map[string]int32{
		"log.dev1": 1, "/a/b.dev2.csv": 2, "x.dev12.txt": 12, "x.devices.csv": 0,
		"x.dev": 0, "dev3.csv": 0, "a.dev1.dev7": 7, "x.dev99999999999.csv": 0,
	} {
		assert.Equal(t, dev, rmmDevice(name), name)
	}
}

func TestRMMErrors(t *testing.T) {
	for _, c := range []struct {
		file         string
		line         int
		nativeRecord int64
		msg          string
	}{
		{"rmm_bad_hex.csv", 3, 1, `bad pointer "0xZZ"`},
		{"rmm_bad_negative.csv", 2, 0, `negative size "-16"`},
		{"rmm_bad_columns.csv", 4, 2, "4 columns, but the header has 6"},
		{"rmm_bad_action.csv", 2, 0, `unknown action "reallocate"`},
	} {
		t.Run(c.file, func(t *testing.T) {
			_, err := readRMMFile(t, c.file)
			fe := mustFormatError(t, err)
			assert.Equal(t, filepath.Join("testdata", c.file), fe.File)
			assert.Equal(t, c.nativeRecord, fe.Event)
			assert.Contains(t, fe.Msg, "line "+strconv.Itoa(c.line)+":")
			assert.Contains(t, fe.Msg, c.msg)
		})
	}
}

func TestRMMBadInput(t *testing.T) {
	h := rmmHeader + "\n"
	for _, c := range []struct{ in, msg string }{
		{"", "empty file"},
		{"\n\n", "empty file"},
		{"hello,world\n", "not an RMM log"},
		{"Thread,Time,Pointer\n", "not an RMM log"},
		{h + "1,00:00:00.0,allocate,0x10,99999999999999999999999,0\n", `bad size`},
		{h + "1,00:00:00.0,allocate,0x10,12a,0\n", `bad size "12a"`},
		{h + "1,00:00:00.0,allocate,0x10,,0\n", `bad size ""`},
		{h + "1,00:00:00.0,allocate,,16,0\n", `bad pointer ""`},
		{h + "1,00:00:00.0,allocate,0x,16,0\n", `bad pointer "0x"`},
		{h + "1,00:00:00.0,allocate,0x11112222333344445,16,0\n", `bad pointer`},
		{h + "1,00:00:00.0,allocate,0x10,16,zz\n", `bad stream "zz"`},
		{h + "1,00:00:00.0,Allocate,0x10,16,0\n", `unknown action "Allocate"`},
		{h + strings.Repeat("x", rmmMaxLine+10) + "\n", "longer than"},
	} {
		_, err := ReadRMM(strings.NewReader(c.in), "in.csv")
		fe := mustFormatError(t, err)
		assert.Contains(t, fe.Msg, c.msg, "input %.60q", c.in)
	}
}

func TestRMMTolerated(t *testing.T) {
	in := "\xef\xbb\xbf" + // a BOM
		" Thread , Time , Action , Pointer , Size , Stream \n" +
		"1, 00:00:01.5 ,allocate, 0X00ABCDEF ,16, 0 \n" +
		"1,,free,0xabcdef,16,\n" + // empty time and stream
		"1,25:00:00.000000,allocate,0x1,0,0x0\n" + // impossible time: 0
		"1,1:2:3,allocate,0x2,1,0x0\n" + // no fraction, one-digit fields
		"1,00:00:00.1234567891,allocate,0x3,1,0x0" // fraction too long: 0; no final newline
	tr, err := ReadRMM(strings.NewReader(in), "x.csv")
	require.NoError(t, err)
	want := []Event{
		{Action: ActionAlloc, Addr: 0xabcdef, Size: 16, TimeUS: rmmTOD(0, 0, 1, 500000)},
		{Action: ActionFreeRequested, Addr: 0xabcdef, Size: 16},
		{Action: ActionFreeCompleted, Addr: 0xabcdef, Size: 16},
		{Action: ActionAlloc, Addr: 1},
		{Action: ActionAlloc, Addr: 2, Size: 1, TimeUS: rmmTOD(1, 2, 3, 0)},
		{Action: ActionAlloc, Addr: 3, Size: 1},
	}
	assert.Equal(t, want, tr.Events)
}

func TestIsRMM(t *testing.T) {
	for in, want := range map[string]bool{
		rmmHeader + "\n1,2,3":             true,
		rmmHeader:                         true,
		rmmHeader + "\r\n":                true,
		"\xef\xbb\xbf" + rmmHeader + "\n": true,
		"Thread,Time,Action,Pointer,Size,Stream,Extra\n": true,
		"thread,time,action,pointer,size\n":              true,
		"Thread,Time,Act":                                true, // a short prefix that agrees
		"Thread":                                         false,
		"Thread,Time,Foo":                                false,
		"Action,Size\n":                                  false,
		"1,00:00:00.0,allocate,0x1,1,0\n":                false,
		"MRTRACE\x00":                                    false,
		"":                                               false,
	} {
		assert.Equal(t, want, IsRMM([]byte(in)), "%q", in)
	}
}

// The reader streams: Initial and Final are empty, a free's second half
// comes from the queue, and io.EOF repeats.
func TestRMMStreaming(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "rmm_basic.csv"))
	require.NoError(t, err)
	defer f.Close()
	r, err := NewRMMReader(f, "basic")
	require.NoError(t, err)
	segs, rec := r.Initial()
	assert.Nil(t, segs)
	assert.False(t, rec)
	n := 0
	var e Event
	for {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		n++
	}
	assert.Equal(t, 7, n)
	assert.Equal(t, io.EOF, r.Next(&e))
	_, ok := r.Final()
	assert.False(t, ok)
	require.NoError(t, r.Close())
}

// An RMM log converts to the native format and back unchanged.
func TestRMMToNative(t *testing.T) {
	tr, err := readRMMFile(t, "rmm_basic.csv")
	require.NoError(t, err)
	got, err := readNative(t, writeNative(t, tr))
	require.NoError(t, err)
	tr.Header.Version = FormatVersion
	assert.Equal(t, nativeResolve(tr), nativeResolve(got))
}

func FuzzRMM(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "rmm_*.csv"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadRMM(bytes.NewReader(data), "fuzz.csv")
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("not a *FormatError: %T %v", err, err)
			}
			return
		}
		for i, e := range tr.Events {
			if e.Action != ActionAlloc && e.Action != ActionFreeRequested && e.Action != ActionFreeCompleted && e.Action != ActionOOM {
				t.Fatalf("event %d: action %v", i, e.Action)
			}
			if e.Action == ActionFreeRequested && (i+1 >= len(tr.Events) || tr.Events[i+1].Action != ActionFreeCompleted) {
				t.Fatalf("event %d: free_requested without free_completed", i)
			}
		}
		if _, err := readNative(t, writeNative(t, tr)); err != nil {
			t.Fatal(err)
		}
	})
}

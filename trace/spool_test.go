package trace

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// spoolWrite spools tr's events and writes the snapshot from the spool.
func spoolWrite(t testing.TB, tr *Trace) ([]byte, *PyTorchSpool) {
	t.Helper()
	s, err := NewPyTorchSpool(t.TempDir(), tr.Stacks)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	for i := range tr.Events {
		require.NoError(t, s.Add(&tr.Events[i]))
	}
	rest := *tr
	rest.Events = nil
	var buf bytes.Buffer
	require.NoError(t, s.WriteSnapshot(&buf, &rest))
	return buf.Bytes(), s
}

// smallSpoolBlocks makes every device's events span many blocks.
func smallSpoolBlocks(t *testing.T) {
	old := spoolBlock
	spoolBlock = 64
	t.Cleanup(func() { spoolBlock = old })
}

// The spool writes the bytes WritePyTorch writes for the whole trace:
// real snapshots, and random traces of several devices with every action,
// labels, stacks and extreme values, in one block and in many.
func TestPyTorchSpoolSameBytes(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(fmt.Sprintf("small blocks %v", small), func(t *testing.T) {
			if small {
				smallSpoolBlocks(t)
			}
			for _, path := range ptSnapshotFiles(t) {
				tr, err := ReadPyTorchFile(path)
				require.NoError(t, err)
				got, s := spoolWrite(t, tr)
				require.True(t, bytes.Equal(ptWrite(t, tr), got), "%s: the spool's snapshot differs from WritePyTorch's", path)
				require.Equal(t, int64(len(tr.Events)), s.Events())
				if small && len(tr.Events) > 100 {
					require.Greater(t, len(s.devs[tr.Events[0].Device].blocks), 10, "%s: events in many blocks", path)
				}
			}
			for seed := uint64(0); seed < 300; seed++ {
				tr := ptRandomTrace(rand.New(rand.NewPCG(seed, 42)))
				got, s := spoolWrite(t, tr)
				require.True(t, bytes.Equal(ptWrite(t, tr), got), "seed %d", seed)
				left := int64(0)
				for _, e := range tr.Events {
					if ptLeftOut(e.Action) {
						left++
					}
				}
				require.Equal(t, left, s.LeftOut(), "seed %d", seed)
			}
		})
	}
}

// A replay's stream of events packs to a few bytes each (the spool is
// what a big recording costs on disk), and the file is gone from the
// directory from the start.
func TestPyTorchSpoolCompact(t *testing.T) {
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	dir := t.TempDir()
	s, err := NewPyTorchSpool(dir, tr.Stacks)
	require.NoError(t, err)
	for i := range tr.Events {
		require.NoError(t, s.Add(&tr.Events[i]))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the spool file is unlinked once open")
	s.sync() // the packer's blocks are read here
	d := s.devs[0]
	packed := s.size + int64(len(d.open))
	require.Less(t, float64(packed)/float64(len(tr.Events)), 16.0, "%d bytes for %d events", packed, len(tr.Events))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "twice")
	require.Error(t, s.Add(&tr.Events[0]))
	require.Error(t, s.WriteSnapshot(&bytes.Buffer{}, &Trace{}))
}

// Events WritePyTorch refuses are refused by Add, with WritePyTorch's
// words and the event's index in the trace; the spool then stays failed.
func TestPyTorchSpoolBadEvents(t *testing.T) {
	bogus := NewStacks()
	bogusID := bogus.InternIndices([]uint32{5})
	for _, c := range []struct {
		name   string
		stacks *Stacks
		e      Event
		want   string
	}{
		{"negative device", nil, Event{Action: ActionAlloc, Device: -1}, "event 2: device -1 out of range"},
		{"huge device", nil, Event{Action: ActionEmptyCache, Device: 1 << 20}, "event 2: device 1048576"},
		{"invalid action", nil, Event{Action: ActionInvalid}, "event 2: invalid action invalid"},
		{"action out of range", nil, Event{Action: 200}, "event 2: invalid action action(200)"},
		{"size", nil, Event{Action: ActionAlloc, Size: math.MaxUint64}, "event 2 size"},
		{"device free", nil, Event{Action: ActionOOM, DeviceFree: 1 << 63}, "event 2 device_free"},
		{"unknown stack", NewStacks(), Event{Action: ActionAlloc, Stack: 999}, "event 2: stack 999 is not in the stack table"},
		{"nil stacks", nil, Event{Action: ActionAlloc, Stack: 1}, "event 2: stack 1 is not in the stack table"},
		{"bogus frame", bogus, Event{Action: ActionMarker, Label: "x", Stack: bogusID}, "names frame 5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewPyTorchSpool(t.TempDir(), c.stacks)
			require.NoError(t, err)
			defer s.Close()
			ok := Event{Action: ActionAlloc, Addr: 1, Size: 2}
			require.NoError(t, s.Add(&ok))
			require.NoError(t, s.Add(&Event{Action: ActionStreamSync, Size: math.MaxUint64}), "left out: its size is not written")
			err = s.Add(&c.e)
			require.ErrorContains(t, err, "writing a PyTorch snapshot")
			require.ErrorContains(t, err, c.want)
			require.Equal(t, err, s.Add(&ok), "the first error stays")
			require.Equal(t, err, s.WriteSnapshot(&bytes.Buffer{}, &Trace{}))

			// The same event in a trace: WritePyTorch's message.
			tr := &Trace{Stacks: c.stacks, Events: []Event{ok, {Action: ActionStreamSync}, c.e}}
			werr := WritePyTorch(&bytes.Buffer{}, tr)
			require.ErrorContains(t, werr, c.want)
		})
	}
}

// A failing writer: its error, and no write after it, at any point of
// the file.
func TestPyTorchSpoolWriterErrors(t *testing.T) {
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		tr.Events = append(tr.Events, tr.Events...)
	}
	want, s := spoolWrite(t, tr)
	rest := *tr
	rest.Events = nil
	for _, after := range []int{0, 1, ptFlushAt + 10, len(want) / 2, len(want) - 1} {
		w := &failingWriter{left: after}
		require.ErrorIs(t, s.WriteSnapshot(w, &rest), errPTBoom, "after %d bytes", after)
		require.Zero(t, w.writes, "writes after the failure")
	}
	require.NoError(t, s.WriteSnapshot(&failingWriter{left: len(want)}, &rest))
	require.Error(t, s.WriteSnapshot(&bytes.Buffer{}, tr), "a trace with events of its own")
}

// The end state follows WritePyTorch's rule: Final, or Initial when there
// is no Final and no event, or nothing; a device named only by a left-out
// event still gets its list.
func TestPyTorchSpoolSegmentsRule(t *testing.T) {
	seg := []Segment{{Device: 0, Address: 0x1000, TotalSize: 2 << 20, Pool: "large",
		Blocks: []Block{{Address: 0x1000, Size: 2 << 20, State: BlockInactive}}}}
	for _, c := range []struct {
		name   string
		events []Event
		tr     Trace
	}{
		{"initial without events", nil, Trace{Initial: seg}},
		{"initial with events", []Event{{Action: ActionAlloc, Addr: 0x1000, Size: 512}}, Trace{Initial: seg}},
		{"initial with a left-out event", []Event{{Action: ActionEmptyCache}}, Trace{Initial: seg}},
		{"final", []Event{{Action: ActionAlloc, Addr: 0x1000, Size: 512}}, Trace{Final: seg, HasFinal: true}},
		{"device of a left-out event", []Event{{Action: ActionAlloc, Size: 1}, {Action: ActionStreamSync, Device: 3}}, Trace{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := c.tr
			tr.Stacks = NewStacks()
			tr.Events = c.events
			got, _ := spoolWrite(t, &tr)
			require.Equal(t, ptWrite(t, &tr), got)
			back, err := ReadPyTorch(bytes.NewReader(got), "x")
			require.NoError(t, err)
			require.Equal(t, len(c.tr.Initial) > 0 && len(c.events) == 0 || c.tr.HasFinal, len(back.Final) > 0)
		})
	}
}

func BenchmarkPyTorchSpool(b *testing.B) {
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(b, err)
	for len(tr.Events) < 100_000 {
		tr.Events = append(tr.Events, tr.Events...)
	}
	rest := *tr
	rest.Events = nil
	var buf bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := NewPyTorchSpool(b.TempDir(), tr.Stacks)
		if err != nil {
			b.Fatal(err)
		}
		for j := range tr.Events {
			if err := s.Add(&tr.Events[j]); err != nil {
				b.Fatal(err)
			}
		}
		buf.Reset()
		if err := s.WriteSnapshot(&buf, &rest); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tr.Events)), "ns/event")
}

// WriteSnapshotFile: the bytes of WriteSnapshot, through a rename; a
// failure keeps the old file and leaves no temporary one.
func TestPyTorchSpoolWriteFile(t *testing.T) {
	tr := ptSampleTrace()
	want, s := spoolWrite(t, tr)
	rest := *tr
	rest.Events = nil
	dir := t.TempDir()
	path := dir + "/out.pickle"
	require.NoError(t, s.WriteSnapshotFile(path, &rest))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, got)

	bad := rest
	bad.Final = append([]Segment(nil), rest.Final...)
	bad.Final[0].TotalSize = 1 << 63
	require.ErrorContains(t, s.WriteSnapshotFile(path, &bad), "segment 0 total_size")
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, again)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
}

// The packer packs what Add hands it in batches: a trace of many batches,
// written, then grown and written again, gives WritePyTorch's bytes each
// time (WriteSnapshot waits for the packer), in one block and in many.
func TestPyTorchSpoolPackerBatches(t *testing.T) {
	base, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	tr := *base
	for len(tr.Events) < 3*spoolBatch+100 {
		tr.Events = append(tr.Events, base.Events...)
	}
	for _, small := range []bool{false, true} {
		if small {
			smallSpoolBlocks(t)
		}
		s, err := NewPyTorchSpool(t.TempDir(), tr.Stacks)
		require.NoError(t, err)
		half := len(tr.Events)/2 + 1
		for i := range tr.Events[:half] {
			require.NoError(t, s.Add(&tr.Events[i]))
		}
		first := tr
		first.Events = tr.Events[:half]
		rest := tr
		rest.Events = nil
		var buf bytes.Buffer
		require.NoError(t, s.WriteSnapshot(&buf, &rest))
		require.True(t, bytes.Equal(ptWrite(t, &first), buf.Bytes()), "small blocks %v: the first half", small)
		for i := half; i < len(tr.Events); i++ {
			require.NoError(t, s.Add(&tr.Events[i]))
		}
		buf.Reset()
		require.NoError(t, s.WriteSnapshot(&buf, &rest))
		require.True(t, bytes.Equal(ptWrite(t, &tr), buf.Bytes()), "small blocks %v: the whole", small)
		require.Equal(t, int64(len(tr.Events)), s.Events())
		require.NoError(t, s.Close())
	}
}

// A write to the spool file that fails on the packer reaches the caller:
// Add returns it once a later batch is handed over, WriteSnapshot at once,
// with the spool's words.
func TestPyTorchSpoolPackerFileError(t *testing.T) {
	smallSpoolBlocks(t)
	tr, err := ReadPyTorchFile(testdataSnapshot)
	require.NoError(t, err)
	for _, via := range []string{"add", "write"} {
		s, err := NewPyTorchSpool(t.TempDir(), tr.Stacks)
		require.NoError(t, err)
		require.NoError(t, s.f.Close()) // every write of a block fails
		var addErr error
		n := 0
		if via == "add" {
			for n < 10*spoolBatch && addErr == nil {
				addErr = s.Add(&tr.Events[n%len(tr.Events)])
				n++
			}
			require.Error(t, addErr, "Add never returned the packer's error")
			require.Contains(t, addErr.Error(), "spooling the entries")
		} else {
			for i := range tr.Events {
				require.NoError(t, s.Add(&tr.Events[i]))
			}
		}
		rest := *tr
		rest.Events = nil
		err = s.WriteSnapshot(&bytes.Buffer{}, &rest)
		require.Error(t, err, via)
		require.Contains(t, err.Error(), "spooling the entries")
		if addErr != nil {
			require.Equal(t, addErr, err, "the first error stays")
		}
		s.Close()
	}
}

// CheckStacksLater: the events' stacks are checked against the table at
// WriteSnapshot, so the table may be filled after them (a speculative
// replay's, filled once the import is over): the same bytes as a spool
// given the full table from the start; a stack still not in it is
// WriteSnapshot's error, in Add's words, at its first event.
func TestPyTorchSpoolCheckStacksLater(t *testing.T) {
	for _, path := range ptSnapshotFiles(t) {
		tr, err := ReadPyTorchFile(path)
		require.NoError(t, err)
		want, _ := spoolWrite(t, tr)
		st := NewStacks()
		s, err := NewPyTorchSpool(t.TempDir(), st)
		require.NoError(t, err)
		s.CheckStacksLater()
		for i := range tr.Events {
			require.NoError(t, s.Add(&tr.Events[i]))
		}
		*st = *tr.Stacks
		rest := *tr
		rest.Events = nil
		var buf bytes.Buffer
		require.NoError(t, s.WriteSnapshot(&buf, &rest))
		require.True(t, bytes.Equal(want, buf.Bytes()), "%s", path)
		require.NoError(t, s.Close())
	}
	bogus := NewStacks()
	bogusID := bogus.InternIndices([]uint32{5})
	for _, c := range []struct {
		stacks *Stacks
		stack  StackID
		want   string
	}{
		{NewStacks(), 999, "event 2: stack 999 is not in the stack table"},
		{NewStacks(), 1 << 30, "event 2: stack 1073741824 is not in the stack table"},
		{nil, 1, "event 2: stack 1 is not in the stack table"},
		{bogus, bogusID, "event 2: stack 1 names frame 5"},
	} {
		s, err := NewPyTorchSpool(t.TempDir(), c.stacks)
		require.NoError(t, err)
		s.CheckStacksLater()
		for _, e := range []Event{{Action: ActionAlloc, Addr: 1, Size: 2}, {Action: ActionStreamSync}, {Action: ActionAlloc, Addr: 3, Size: 2, Stack: c.stack}, {Action: ActionFreeRequested, Addr: 3, Size: 2, Stack: c.stack}} {
			require.NoError(t, s.Add(&e), "checked at WriteSnapshot")
		}
		err = s.WriteSnapshot(&bytes.Buffer{}, &Trace{})
		require.ErrorContains(t, err, c.want)
		require.NoError(t, s.Close())
	}
}

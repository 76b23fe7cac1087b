// Command annotate writes a copy of a snapshot pickle with record_function
// annotations added, as PyTorch >= 2.6 lists them in external_annotations:
// one annotation every 2000 entries or so, right after an alloc,
// alternately the START and the END of "Optimizer.step#AdamW.step".
// It is how docs/performance.md's annotated 1 GB snapshot was made (a real
// training snapshot of that size has such pairs every step, and no such
// file is at hand):
//
//	go run ./bench/annotate big.pickle big-annotated.pickle
//
// It holds the whole trace in memory (about 3.7 GB for 25 M entries).
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/memreplay/memreplay/trace"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: annotate IN.pickle OUT.pickle")
		os.Exit(2)
	}
	tr, err := trace.ReadPyTorchFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "annotate:", err)
		os.Exit(2)
	}
	out := make([]trace.Event, 0, len(tr.Events)+len(tr.Events)/1000)
	start := tr.Stacks.Intern([]trace.Frame{{Filename: "Optimizer.step#AdamW.step", Name: "START"}})
	end := tr.Stacks.Intern([]trace.Frame{{Filename: "Optimizer.step#AdamW.step", Name: "END"}})
	open, since, n := false, 0, 0
	for i, e := range tr.Events {
		out = append(out, e)
		since++
		// The importer puts a START before the first entry at its time or
		// later and an END after the entries at its time: a START at the
		// next entry's time and an END at the alloc's own time both land
		// right after the alloc, so the writer lists them in
		// external_annotations rather than as user_defined entries.
		if e.Action == trace.ActionAlloc && since >= 2000 && i+1 < len(tr.Events) && tr.Events[i+1].Device == e.Device && tr.Events[i+1].TimeUS > e.TimeUS {
			m := trace.Event{Action: trace.ActionMarker, Device: e.Device, TimeUS: tr.Events[i+1].TimeUS, Label: "Optimizer.step#AdamW.step", Stack: start}
			if open {
				m.Stack, m.TimeUS = end, e.TimeUS
			}
			open = !open
			out = append(out, m)
			since, n = 0, n+1
		}
	}
	tr.Events = out
	f, err := os.Create(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "annotate:", err)
		os.Exit(2)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = trace.WritePyTorch(w, tr)
	if err == nil {
		err = w.Flush()
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "annotate:", err)
		os.Exit(1)
	}
	fmt.Printf("%d annotations, %d events\n", n, len(out))
}

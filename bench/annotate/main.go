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
// The annotations are trace.Annotations (the writer lists them in
// external_annotations): markers among the events would be written as
// ≈2.4's user_defined entries.
package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"

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
	// external_annotations (trace.Annotation, beside the events): the
	// importer places a START before the first entry at its time or later
	// and an END after the entries at its time, so a START at the next
	// entry's time and an END at the alloc's own time both land right
	// after the alloc.
	open, since := false, 0
	for i, e := range tr.Events {
		since++
		if e.Action == trace.ActionAlloc && since >= 2000 && i+1 < len(tr.Events) && tr.Events[i+1].Device == e.Device && tr.Events[i+1].TimeUS > e.TimeUS {
			a := trace.Annotation{Device: e.Device, TimeUS: tr.Events[i+1].TimeUS, Name: "Optimizer.step#AdamW.step", Stage: "START"}
			if open {
				a.TimeUS, a.Stage = e.TimeUS, "END"
			}
			open = !open
			tr.Annotations = append(tr.Annotations, a)
			since = 0
		}
	}
	// PyTorch's list is in time order (one ring buffer for all devices).
	slices.SortStableFunc(tr.Annotations, func(a, b trace.Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) })
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
	fmt.Printf("%d annotations, %d events\n", len(tr.Annotations), len(tr.Events))
}

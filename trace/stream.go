package trace

// Streaming a snapshot's trace entries.
//
// A snapshot of 25 million entries is 1 GB of pickle; decoded whole, as
// pickle.go's object graph, and then converted, it took six times that in
// memory. Nearly all of it is the entries, and an entry is needed only
// until it is an Event. So while a snapshot is decoded (newStreamState),
// the unpickler recognises its fixed shape and hands each entry dict to
// the importer as soon as it is complete; the importer converts it and
// the unpickler frees the entry and everything made inside it. What later
// opcodes may still refer to stays: strings, and the frame dicts and frame
// lists the entry's stack was made of, each replaced in the memo by what
// it was converted to (pkFrame: a frame index, pkStack: a StackID), which
// the importer reads like the object.
//
// The shape is recognised from the stack, as PyTorch's pickler (Python's,
// C++'s, and memreplay's writer) lays it out:
//
//   - the root dict at the bottom of the stack, its key "device_traces"
//     on top (pushed as the key of a SETITEM, or as a key of the root's
//     SETITEMS batch) when an EMPTY_LIST is pushed: that list is
//     device_traces, "dt";
//   - an EMPTY_LIST pushed onto dt (APPEND) or into dt's MARK batch
//     (APPENDS): a device's trace list, the next device;
//   - an EMPTY_DICT pushed onto a trace list or into its MARK batch: an
//     entry. It is complete when the next entry of that batch starts or
//     the batch is appended to the list, and it must then be on top of
//     the stack. It is replaced there by pkEntry (its serial number), and
//     a trace list keeps only the range of serials appended to it.
//
// Nothing may change what was converted, and the layout must turn out to
// be what was assumed: the root's device_traces is dt, dt holds the trace
// lists in the order they were made, and the entries were appended to the
// lists in the order they were made, each once. Pickle allows other
// layouts (an entry referred to again through the memo, changed after it
// was complete, a trace list referred to from elsewhere, lists filled out
// of order); a snapshot pickled that way decodes to a shapeError, naming
// the byte offset, and the import starts again on the whole object graph
// (readPyTorchPath, readPyTorchData), so the result is always the one the whole
// graph gives, only the memory differs.
//
// The segments dict comes before device_traces in PyTorch's snapshots and
// is converted after decoding, as before; its stacks are interned when dt
// is found (preIntern), so that stacks are numbered in the order the
// whole-graph import numbers them: segments first, then entries.
//
// What still grows with the entries, besides the events: the memo slot of
// a memoised entry or frame list (8 bytes each; Python's pickler memoises
// every dict and list, memreplay's writer only shared ones), and the
// stack when a whole device list is pushed before one APPENDS (8 bytes an
// entry until then; PyTorch's C++ pickler does that, Python's and
// memreplay's write batches of 1000).

import "fmt"

// shapeError says a streamed snapshot is not laid out as streaming
// assumes (see the file comment); the caller imports it whole instead.
type shapeError struct {
	off int64
	msg string
}

func (e *shapeError) Error() string {
	return fmt.Sprintf("byte offset %d: %s (snapshot layout not streamed)", e.off, e.msg)
}

func (u *unpickler) shapef(off int, format string, args ...any) error {
	return &shapeError{off: u.base + int64(off), msg: fmt.Sprintf(format, args...)}
}

// streamState is the streaming of one decoding run.
type streamState struct {
	c      *ptConv
	dt     pv // the device_traces list; 0 until found
	traces []traceRun
	// The entry being decoded, when open: its stack position and dict,
	// and the arenas' and memo's lengths when it began (everything made
	// from then on was made inside it).
	open      bool
	entryPos  int
	entryDict int
	entryDev  int
	listW     int
	memoW     int
	pvSlab    []pv
	itemSlab  []pyItem
	serials   int64 // entries converted
	appended  int64 // entries appended to their trace lists
	pendDev   int   // the trace list of the entries converted, not yet appended

	// off is the byte offset where the last converted entry ended (the
	// next opcode's): what a ProgressObserver is told (pipeLog.off).
	off int64
}

// traceRun is what a trace list holds: the serials first..first+n-1.
type traceRun struct{ first, n int64 }

// entryAt is called before an EMPTY_DICT at start: it returns the device
// whose entry the dict begins, or -1. A complete entry below it is
// converted first.
func (u *unpickler) entryAt(start int) (int, error) {
	st := u.st
	n := len(u.stack)
	var l *pyList
	if n > 0 {
		if top := u.stack[n-1]; top.kind() == pkList {
			if x := u.lists.at(top.payload()); x.trace != 0 {
				l = x
			}
		}
	}
	if l == nil && u.fence > 0 {
		if t := u.stack[u.fence-1]; t.kind() == pkList {
			if x := u.lists.at(t.payload()); x.trace != 0 {
				l = x
			}
		}
	}
	if l == nil {
		return -1, nil
	}
	if st.open {
		if err := u.closeEntry(start); err != nil {
			return 0, err
		}
	}
	dev := int(l.trace - 1)
	if st.serials > st.appended && dev != st.pendDev {
		return 0, u.shapef(start, "entries of two devices' trace lists interleaved")
	}
	return dev, nil
}

// openEntry starts the entry dict i of device dev (on top of the stack
// once pushed).
func (u *unpickler) openEntry(i, dev int) {
	st := u.st
	st.open = true
	st.entryPos = len(u.stack)
	st.entryDict = i
	st.entryDev = dev
	st.listW = u.lists.n
	st.memoW = len(u.memo)
	// Fresh slabs when little is left: the entry's items are carved from
	// them and handed back by closeEntry, so a slab nearly used up would
	// otherwise be replaced inside every entry.
	if len(u.pvSlab) < 256 {
		u.pvSlab = make([]pv, 4096)
	}
	if len(u.itemSlab) < 256 {
		u.itemSlab = make([]pyItem, 2048)
	}
	st.pvSlab, st.itemSlab = u.pvSlab, u.itemSlab
}

// closeEntry converts the open entry, which must be on top of the stack,
// and frees what was made inside it.
func (u *unpickler) closeEntry(start int) error {
	st, c := u.st, u.st.c
	n := len(u.stack)
	e := mkpv(pkDict, uint64(st.entryDict))
	if st.entryPos != n-1 || u.stack[n-1] != e {
		return u.shapef(start, "a trace entry left the stack before it was appended to its list")
	}
	if err := c.spend(1); err != nil {
		return u.shapef(start, "trace entry %d: %s", st.serials, err.msg)
	}
	if err := c.event(c.sink.next(), e, int32(st.entryDev)); err != nil {
		return u.shapef(start, "trace entry %d%s: %s", st.serials, err.path, err.msg)
	}
	st.off = u.base + int64(start)
	c.sink.commit()
	// What the memo kept from inside the entry becomes what it was
	// converted to; anything else there may not be referred to again.
	for i := st.memoW; i < len(u.memo); i++ {
		switch v := u.memo[i]; v.kind() {
		case pkDict:
			if int(v.payload()) >= st.entryDict {
				if d := u.dicts.at(v.payload()); d.tag != 0 {
					u.memo[i] = mkpv(pkFrame, uint64(d.tag-1))
				} else {
					u.memo[i] = mkpv(pkDead, 0)
				}
			}
		case pkList, pkTuple:
			if int(v.payload()) >= st.listW {
				if l := u.lists.at(v.payload()); l.tag != 0 && v.kind() == pkList {
					u.memo[i] = mkpv(pkStack, uint64(l.tag-1))
				} else {
					u.memo[i] = mkpv(pkDead, 0)
				}
			}
		}
	}
	u.dicts.truncate(st.entryDict)
	u.lists.truncate(st.listW)
	u.pvSlab, u.itemSlab = st.pvSlab, st.itemSlab
	u.stack[n-1] = mkpv(pkEntry, uint64(st.serials))
	st.pendDev = st.entryDev
	st.serials++
	st.open = false
	return nil
}

// appendEntries appends stack[m:] to the trace list l (APPENDS, or
// APPEND with m = len(stack)-1); the caller pops them.
func (u *unpickler) appendEntries(start, m int, l *pyList) error {
	st := u.st
	if st.open {
		if err := u.closeEntry(start); err != nil {
			return err
		}
	}
	run := &st.traces[l.trace-1]
	for _, it := range u.stack[m:] {
		if it.kind() != pkEntry || int64(it.payload()) != st.appended || st.pendDev != int(l.trace-1) {
			return u.shapef(start, "a trace list given something other than its next entry")
		}
		if run.n == 0 {
			run.first = st.appended
		} else if run.first+run.n != st.appended {
			return u.shapef(start, "a trace list's entries not contiguous")
		}
		run.n++
		st.appended++
	}
	return nil
}

// noteList is called before an EMPTY_LIST v is pushed while no entry is
// open: it recognises device_traces and the trace lists.
func (u *unpickler) noteList(v pv) {
	st := u.st
	n := len(u.stack)
	if st.dt == 0 {
		if n >= 2 && u.isStr(u.stack[n-1], "device_traces") && u.stack[0].kind() == pkDict &&
			((len(u.marks) == 0 && n == 2) || (len(u.marks) == 1 && u.marks[0] == 1 && n%2 == 0)) {
			st.dt = v
			u.preIntern(n)
		}
		return
	}
	if (n > 0 && u.stack[n-1] == st.dt) || (u.fence > 0 && u.stack[u.fence-1] == st.dt) {
		st.traces = append(st.traces, traceRun{})
		u.lists.at(v.payload()).trace = uint32(len(st.traces))
	}
}

// preIntern interns the stacks of the root's segments seen so far, in
// the order convertPyTorch will (see the file comment). n is the stack's
// length; the root is at 0, its key-value batch from 1 on.
func (u *unpickler) preIntern(n int) {
	var segs pv
	found := false
	for _, it := range u.dicts.at(u.stack[0].payload()).items {
		if u.isStr(it.key, "segments") {
			segs, found = it.val, true
		}
	}
	if len(u.marks) == 1 {
		for k := 1; k+1 < n-1; k += 2 {
			if u.isStr(u.stack[k], "segments") {
				segs, found = u.stack[k+1], true
			}
		}
	}
	if found {
		u.st.c.preIntern(segs)
	}
}

// checkTarget refuses, while streaming, a change to what was converted
// (a frame, a frame list, an entry) or, inside an entry, to a container
// made before it.
func (u *unpickler) checkTarget(start int, op byte, t pv) error {
	st := u.st
	switch t.kind() {
	case pkEntry, pkStack, pkFrame, pkDead:
		return u.shapef(start, "%s on an object already converted", pickleOpName(op))
	case pkDict:
		d := u.dicts.at(t.payload())
		if d.tag != 0 || (st.open && int(t.payload()) < st.entryDict) {
			return u.shapef(start, "%s on a dict already converted or made before the trace entry", pickleOpName(op))
		}
	case pkList:
		l := u.lists.at(t.payload())
		if l.tag != 0 || (st.open && l.trace == 0 && int(t.payload()) < st.listW) {
			return u.shapef(start, "%s on a list already converted or made before the trace entry", pickleOpName(op))
		}
	}
	return nil
}

// preIntern interns the stacks of segments (the root's segments value,
// when dt is found) in the order segments and block will, so that the
// streamed entries' stacks are numbered after them as in a whole import.
// It stops at the first thing segments would refuse: the import then
// fails there, and is done again whole.
func (c *ptConv) preIntern(v pv) {
	if v.kind() != pkList || c.p.list(v).trace != 0 {
		return
	}
	for _, sv := range c.p.list(v).items {
		if sv.kind() != pkDict {
			return
		}
		var blocks pv
		for _, it := range c.p.dict(sv).items {
			switch c.word(it.key) {
			case wFrames:
				if _, err := c.stack(it.val); err != nil {
					return
				}
			case wBlocks:
				blocks = it.val
			}
		}
		if blocks.kind() != pkList || c.p.list(blocks).trace != 0 {
			return
		}
		for _, bv := range c.p.list(blocks).items {
			if bv.kind() != pkDict {
				return
			}
			framed := false
			var history pv
			for _, it := range c.p.dict(bv).items {
				switch c.word(it.key) {
				case wFrames:
					framed = true
					if _, err := c.stack(it.val); err != nil {
						return
					}
				case wHistory:
					history = it.val
				}
			}
			if framed || history.kind() != pkList || c.p.list(history).trace != 0 {
				continue
			}
			if h := c.p.list(history).items; len(h) > 0 && h[0].kind() == pkDict {
				if fr, ok := c.p.get(c.p.dict(h[0]), "frames"); ok {
					if _, err := c.stack(fr); err != nil {
						return
					}
				}
			}
		}
	}
}

package trace

import (
	"bufio"
	"io"
	"os"
	"strconv"
)

// Format names a trace file format.
type Format string

const (
	FormatNative  Format = "native"           // memreplay's own (native.go)
	FormatPyTorch Format = "pytorch-snapshot" // torch.cuda.memory._dump_snapshot pickles
	FormatRMM     Format = "rmm-log"          // RMM logging_resource_adaptor CSV
)

// Detect names the format of a file from its first bytes: the native magic,
// a pickle's PROTO opcode (0x80 and a protocol from 2 to 5), or RMM's CSV
// header line.
func Detect(prefix []byte) (Format, bool) {
	switch {
	case IsNative(prefix):
		return FormatNative, true
	case len(prefix) >= 2 && prefix[0] == 0x80 && prefix[1] >= 2 && prefix[1] <= 5:
		return FormatPyTorch, true
	case IsRMM(prefix):
		return FormatRMM, true
	}
	return "", false
}

// Opened is a trace file ready to read: a streaming Reader for the native
// format; for formats that are read at once, also the whole trace, which a
// replay may then complete (sim/replay's Prepare and PreparePacked
// reconstruct the state before a partial trace): Packed for snapshot
// pickles, whose events are kept packed (they can be tens of millions),
// Trace for RMM logs.
type Opened struct {
	Path   string
	Format Format
	Reader Reader
	Trace  *Trace  // RMM logs; nil otherwise
	Packed *Packed // snapshot pickles; nil otherwise
	file   *os.File
}

// Annotations returns the trace's annotations (Trace.Annotations), as its
// Reader has them (AnnotationsOf): a snapshot's and an RMM log's at once,
// a streamed native trace's as AnnotationsComplete says.
func (o *Opened) Annotations() []Annotation { return AnnotationsOf(o.Reader) }

// Close releases the file.
func (o *Opened) Close() error {
	var err error
	if o.Reader != nil {
		err = o.Reader.Close()
	}
	if o.file != nil {
		if e := o.file.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Open opens a trace file of any supported format. An unknown format is a
// *FormatError at byte offset 0.
func Open(path string) (*Opened, error) { return OpenWith(path, OpenOptions{}) }

// OpenOptions are Open's options.
type OpenOptions struct {
	// Observe, when set, is given a snapshot pickle's events while they
	// are imported (ReadPyTorchObserved).
	Observe EventObserver
}

// OpenWith is Open with options.
func OpenWith(path string, opts OpenOptions) (*Opened, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<16)
	prefix, err := br.Peek(64)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		f.Close()
		return nil, &FormatError{File: path, Offset: 0, Event: -1, Msg: "reading", Err: err}
	}
	format, ok := Detect(prefix)
	if !ok {
		f.Close()
		what := "empty file"
		if len(prefix) > 0 {
			// Escaped to ASCII: the bytes of a binary file, echoed raw,
			// would be terminal control codes.
			what = "starts with " + strconv.QuoteToASCII(string(prefix[:min(len(prefix), 16)]))
		}
		return nil, &FormatError{File: path, Offset: 0, Event: -1,
			Msg: "not a trace: expected a memreplay trace, a PyTorch memory snapshot pickle or an RMM log; " + what}
	}
	o := &Opened{Path: path, Format: format}
	switch format {
	case FormatNative:
		r, err := NewNativeReader(br, path)
		if err != nil {
			f.Close()
			return nil, err
		}
		o.Reader, o.file = r, f
		return o, nil
	case FormatPyTorch:
		// A regular file by path: the importer streams it and checks
		// declared lengths against its size. Anything else (a FIFO, a
		// pipe) from br, which holds the bytes read to detect the format:
		// opened again it would lose them.
		var pipe io.Reader
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			pipe = br
		}
		p, err := readPyTorchPacked(path, pipe, opts.Observe)
		f.Close()
		if err != nil {
			return nil, err
		}
		o.Packed, o.Reader = p, newAheadReader(p)
	case FormatRMM:
		t, err := ReadRMM(br, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		o.Trace, o.Reader = t, t.NewReader()
	}
	return o, nil
}

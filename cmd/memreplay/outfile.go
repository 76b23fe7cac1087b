package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/memreplay/memreplay/internal/outfile"
)

// outFile is an output file being written (internal/outfile: a temporary
// file renamed over the path by commit; a device or FIFO written through;
// a read-only file refused). Every command that writes a file (convert,
// synth, report and --html, replay --record and --pprof) writes it through
// one.
type outFile struct {
	*outfile.File
	path string
}

// createOut starts the output file for path. Its error is the reason alone,
// for the caller to put next to the path.
func createOut(path string) (*outFile, error) {
	f, err := outfile.Create(path)
	if err != nil {
		return nil, err
	}
	return &outFile{f, path}, nil
}

// Write writes into the file; its error names the path ("cannot write
// out.html: no space left on device"), as the encoders writing into it
// pass it on as it is.
func (o *outFile) Write(p []byte) (int, error) {
	n, err := o.File.Write(p)
	if err != nil {
		err = fmt.Errorf("cannot write %s: %w", o.path, err)
	}
	return n, err
}

// commit finishes the file: renamed over the path, or closed when written
// through.
func (o *outFile) commit() error {
	if err := o.Commit(); err != nil {
		return fmt.Errorf("cannot write %s: %w", o.path, err)
	}
	return nil
}

// abort drops an output that was not committed (after commit it does
// nothing).
func (o *outFile) abort() { o.Abort() }

// createOutFor starts flag's output file for path, with the flag and the
// path in its error (a usage error: exit 2).
func createOutFor(flag, path string) (*outFile, error) {
	f, err := createOut(path)
	if err != nil {
		return nil, outError(flag, path, err)
	}
	return f, nil
}

// canWrite fails at once, before any replay, when flag's output path could
// not be written at the end (a missing directory, no permission, a
// directory in the way, a read-only file), so that a long run is never
// lost to a typo.
func canWrite(flag, path string) error {
	if err := outfile.Check(path); err != nil {
		return outError(flag, path, err)
	}
	return nil
}

// outError words why flag's path cannot be written, as a usage error.
func outError(flag, path string, err error) error {
	if _, serr := os.Stat(path); serr == nil {
		// The path is there and is what refuses (a directory, a
		// read-only file, a device this user may not write).
		return usageError{fmt.Errorf("%s %s: %v", flag, path, err)}
	}
	return usageError{fmt.Errorf("%s %s: cannot create a file in %s: %v", flag, path, filepath.Dir(path), err)}
}

// writeFile writes data to path through an outFile.
func writeFile(path string, data []byte) error {
	f, err := createOut(path)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	defer f.abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.commit()
}

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// outFile is an output file being written: a temporary file beside its
// path, which commit renames over the path once complete, so that a
// failure never leaves a partial file under the name and an existing file
// stays as it was until the new one is whole. Every command that writes a
// file (convert, synth, report and --html, replay --record) writes it
// through one.
type outFile struct {
	*os.File
	path string
}

// createOut starts the output file for path. Its error is the reason alone
// (no name: the temporary file's would only confuse), for the caller to
// put next to the path.
func createOut(path string) (*outFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	return &outFile{File: f, path: path}, nil
}

// commit makes the file readable as an ordinary output (0644), closes it
// and renames it over the path; on failure the temporary file is removed.
func (o *outFile) commit() error {
	err := o.Chmod(0o644)
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.Name(), o.path)
	}
	if err != nil {
		os.Remove(o.Name())
	}
	return err
}

// abort drops an output that was not committed: it closes and removes the
// temporary file (after commit, the name is gone and this does nothing).
func (o *outFile) abort() {
	o.Close()
	os.Remove(o.Name())
}

// createOutFor starts flag's output file for path, with the flag and the
// path in its error (a usage error: exit 2): a directory in the way, or a
// directory that cannot take a file.
func createOutFor(flag, path string) (*outFile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, usageError{fmt.Errorf("%s %s: is a directory", flag, path)}
	}
	f, err := createOut(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s %s: cannot create a file in %s: %v", flag, path, filepath.Dir(path), err)}
	}
	return f, nil
}

// canWrite fails at once, before any replay, when flag's output path could
// not be written at the end (a missing directory, no permission, a
// directory in the way), so that a long run is never lost to a typo. It
// creates and removes a temporary file beside path.
func canWrite(flag, path string) error {
	f, err := createOutFor(flag, path)
	if err != nil {
		return err
	}
	f.abort()
	return nil
}

// Package outfile writes the files memreplay's commands and its PyTorch
// plug-in produce, the way a careful cp would.
//
// A regular file is written into a temporary file beside its path and
// renamed over it once complete, so a failure never leaves a partial file
// under the name and an existing file stays as it was until the new one is
// whole. Two cases do not fit that rename, and each once went wrong:
//
//   - A path that names something other than a regular file or a
//     directory (a character device such as /dev/null or /dev/full, a
//     FIFO, a socket) is written through, as cp and a shell redirect
//     do: renaming over it replaced the machine's /dev/full with a regular
//     file and reported success, where a write to it must fail (ENOSPC).
//   - An existing regular file without write permission is refused, as cp
//     refuses it: the rename needs only the directory's permission, so it
//     silently replaced read-only files. The permission bits decide, for
//     root too (root may write anything, but a 0444 file says "keep me",
//     and memreplay runs as root in containers more often than not).
//   - A symbolic link is followed, as cp and a redirect follow it: the
//     temporary file goes beside the link's target and is renamed over
//     the target, so the link stays a link (renaming over the link itself
//     replaced it with a regular file, and its target never changed). A
//     dangling link creates its target.
package outfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrReadOnly is an existing output file whose permission bits deny
// writing it.
var ErrReadOnly = errors.New("permission denied: the file is read-only (remove it, or make it writable, to replace it)")

// ErrIsDir is a directory where an output file should go.
var ErrIsDir = errors.New("is a directory")

// File is an output file being written. Write into it, then Commit; Abort
// (safe after Commit, so it can be deferred) drops an output not
// committed.
type File struct {
	f    *os.File
	path string
	// direct: the path is not a regular file and is written through, with
	// no temporary file, no rename and no change of its mode.
	direct bool
	done   bool
}

// Create starts the output file for path. Its error is the reason alone
// (no name: the temporary file's would only confuse), for the caller to
// put next to the path.
func Create(path string) (*File, error) {
	path = followLinks(path)
	st, err := os.Stat(path)
	if err == nil {
		if err := checkExisting(path, st); err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			// No O_TRUNC: a device or a FIFO has nothing to cut, and
			// O_CREATE could only race with a rename into a new file.
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return nil, bare(err)
			}
			return &File{f: f, path: path, direct: true}, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, bare(err) // a loop of links, a path through a file
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, bare(err)
	}
	return &File{f: f, path: path}, nil
}

// Check fails when path could not be written at the end (a missing
// directory, no permission, a directory in the way, a read-only file),
// for a command to say so before a long run. It opens nothing that is
// not a regular file (opening a FIFO would wait for a reader); for a
// regular file it creates and removes a temporary file beside path.
func Check(path string) error {
	path = followLinks(path)
	st, err := os.Stat(path)
	if err == nil {
		if err := checkExisting(path, st); err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return bare(err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return bare(err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// maxLinks bounds followLinks like the kernel's own limit (ELOOP after
// 40), so that a loop of links ends.
const maxLinks = 40

// followLinks returns what path names after its symbolic links: the path
// itself when it is not a link or cannot be read, the target of a dangling
// link (which Create then creates). A loop is left as it is, and the
// write then fails on it with the system's own error.
func followLinks(path string) string {
	for i := 0; i < maxLinks; i++ {
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return path
		}
		target, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return path
}

// checkExisting refuses what must not be written over: a directory, a
// read-only regular file, a device or FIFO this user may not write.
func checkExisting(path string, st fs.FileInfo) error {
	switch {
	case st.IsDir():
		return ErrIsDir
	case st.Mode().IsRegular() && st.Mode().Perm()&0o222 == 0:
		return ErrReadOnly
	case !canWrite(path):
		if st.Mode().IsRegular() {
			return ErrReadOnly
		}
		return fs.ErrPermission
	}
	return nil
}

// Write writes into the output. Its error is the reason alone, like
// Create's (the temporary file's name would only confuse).
func (o *File) Write(p []byte) (int, error) {
	n, err := o.f.Write(p)
	return n, bare(err)
}

// Name is the file being written: the temporary file, or the path itself
// when written through.
func (o *File) Name() string { return o.f.Name() }

// Direct reports whether the path is written through (not a regular file).
func (o *File) Direct() bool { return o.direct }

// Commit finishes the output: a temporary file is made readable as an
// ordinary output (0644), closed and renamed over the path; a file written
// through is closed. On failure the temporary file is removed.
func (o *File) Commit() error {
	if o.done {
		return errors.New("outfile: committed twice")
	}
	o.done = true
	if o.direct {
		return bare(o.f.Close())
	}
	err := o.f.Chmod(0o644)
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.f.Name(), o.path)
	}
	if err != nil {
		os.Remove(o.f.Name())
	}
	return bare(err)
}

// Abort drops an output that was not committed: it closes and removes the
// temporary file (a file written through is closed; what reached it
// stays). After Commit it does nothing.
func (o *File) Abort() {
	if o.done {
		return
	}
	o.done = true
	o.f.Close()
	if !o.direct {
		os.Remove(o.f.Name())
	}
}

// bare drops a *fs.PathError's operation and name, which would name the
// temporary file; callers name the output path themselves.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every writer of the CLI, each given the same kind of output path: what
// a command line writes to -o, --html, --pprof, --record or OUT.
var writers = []struct {
	name string
	args func(out string) []string
}{
	{"report -o", func(out string) []string { return []string{"report", partialTrace, "--progress=false", "-o", out} }},
	{"replay --pprof", func(out string) []string { return []string{"replay", partialTrace, "--pprof", out} }},
	{"replay --html", func(out string) []string { return []string{"replay", partialTrace, "--html", out} }},
	{"replay --record", func(out string) []string { return []string{"replay", partialTrace, "--record", out} }},
	{"replay --record .pickle", func(out string) []string { return []string{"replay", partialTrace, "--record", out + ".pickle"} }},
	{"compare --html", func(out string) []string {
		return []string{"compare", partialTrace, "--alloc-conf", "expandable_segments:True", "--html", out}
	}},
	{"convert", func(out string) []string { return []string{"convert", partialTrace, out} }},
	{"convert .pickle", func(out string) []string { return []string{"convert", trialTraceFile, out + ".pickle"} }},
	{"synth", func(out string) []string {
		return []string{"synth", "--model", "bert-base", "--batch", "2", "--seq-len", "32", "--steps", "1", "-q", "-o", out}
	}},
}

// A read-only output file is refused like cp refuses it, exit 2, and
// stays as it was (the rename needs only the directory's permission, so
// it used to be replaced). The permission bits decide: the tests run as
// root, who may write anything.
func TestWritersRefuseReadOnlyOutput(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir := t.TempDir()
			args := w.args(filepath.Join(dir, "keep"))
			out := outPath(args)
			require.NoError(t, os.WriteFile(out, []byte("old"), 0o444))
			code, _, stderr := runCLI(args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, "read-only")
			require.Contains(t, stderr, out)
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			require.Equal(t, "old", string(b))
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, ents, 1, "no temporary file left")
		})
	}
}

// outPath is the output path of a writer's command line.
func outPath(args []string) string {
	for i, a := range args {
		switch a {
		case "-o", "--pprof", "--html", "--record":
			return args[i+1]
		}
	}
	return args[len(args)-1] // convert IN OUT
}

// A device is written through, never replaced: a full one fails the
// command with ENOSPC, exit 2 (it used to be replaced by a regular file
// and the command exited 0, which replaced the machine's /dev/full). The
// device is the test's own node with /dev/full's numbers.
func TestWritersReportFullDevice(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir := t.TempDir()
			args := w.args(filepath.Join(dir, "full"))
			out := outPath(args)
			if err := syscall.Mknod(out, syscall.S_IFCHR|0o666, 1<<8|7); err != nil {
				t.Skipf("cannot make a device node here: %v", err)
			}
			if f, err := os.OpenFile(out, os.O_WRONLY, 0); err != nil {
				t.Skipf("cannot open a device node here: %v", err)
			} else {
				f.Close()
			}
			code, _, stderr := runCLI(args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, "cannot write "+out+": no space left on device")
			st, err := os.Lstat(out)
			require.NoError(t, err)
			require.Equal(t, os.ModeDevice|os.ModeCharDevice, st.Mode().Type(), "the device was replaced")
		})
	}
}

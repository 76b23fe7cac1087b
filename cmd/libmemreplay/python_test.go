package main

// The Python package (python/memreplay) and its tests (python/tests), run
// by Debian's interpreter, where Optuna is Debian's python3-optuna: the
// gate across threads and processes, real Optuna studies on SQLite and
// PostgreSQL storage with a worker killed mid-trial, and trials that
// allocate through libmemreplay on the fake CUDA driver.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// debianPython is the interpreter python3-optuna installs for (the python3
// on PATH may be another one without it).
const debianPython = "/usr/bin/python3"

func TestPythonPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Python suite starts worker processes and a database server")
	}
	if _, err := os.Stat(debianPython); err != nil {
		t.Skipf("%s is missing: the Python package's tests need it (Debian's python3, with python3-optuna for the Optuna tests)", debianPython)
	}
	lib := needShared(t)
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	cli := filepath.Join(workDir, "memreplay")
	if b, err := exec.Command(goTool(), "build", "-o", cli, "../memreplay").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/memreplay: %v\n%s", err, b)
	}
	optunaMissing := exec.Command(debianPython, "-c", "import optuna").Run() != nil

	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, "-m", "unittest", "discover", "-v", "-s", filepath.Join(repo, "python", "tests"))
	cmd.Dir = filepath.Join(repo, "python")
	cmd.Env = harnessEnv(t, 512<<20, "MEMREPLAY_LIB="+lib, "MEMREPLAY_BIN="+cli,
		"PYTHONDONTWRITEBYTECODE=1", "MEMREPLAY_QUIET=1", "PYTHONPATH="+filepath.Join(repo, "python"))
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest discover python/tests:\n%s", out)
	require.NoError(t, err, "the Python suite failed (output above)")
	require.Contains(t, string(out), "\nOK")
	if optunaMissing {
		t.Skipf("the gate's tests passed; the Optuna tests skipped: %s has no optuna (apt-get install python3-optuna)", debianPython)
	}
	require.NotContains(t, string(out), "skipped 'optuna", "optuna is importable, so no Optuna test may skip for lack of it")
	require.False(t, strings.Contains(string(out), "skipped 'libmemreplay"), "the fake-GPU tests ran")
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

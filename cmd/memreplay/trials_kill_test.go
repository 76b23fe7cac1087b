package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary run the CLI instead of the tests, so a test
// can kill a real memreplay process.
const childEnv = "MEMREPLAY_TEST_CLI_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	// The scripts of TestScripts (script_test.go) call memreplay by name:
	// testscript puts this binary on their PATH under that name.
	testscript.Main(m, map[string]func(){
		"memreplay": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// trialLines counts the finished trials in a state file.
func trialLines(t *testing.T, path string) (ids []int) {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Kind string `json:"kind"`
			ID   int    `json:"id"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Kind == "trial" {
			ids = append(ids, rec.ID)
		}
	}
	return ids
}

// TestTrialsResumeAfterSIGKILL kills a running `memreplay trials` process
// with SIGKILL once some trials are in its state file, resumes it with
// --resume, and checks that every trial is in the file exactly once and
// that the lines written before the kill are unchanged.
func TestTrialsResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "study.jsonl")
	const n = 60
	args := []string{"trials", "--trials", "60", "--par", "2", "--steps", "2", "--seed", "5", "--state", state}
	child := func(extra ...string) *exec.Cmd {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(append(append([]string{}, args...), extra...), "\x1f"))
		return cmd
	}

	cmd := child()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(2 * time.Minute)
	for len(trialLines(t, state)) < 5 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no trials written in 2 minutes: %s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	before, err := os.ReadFile(state)
	require.NoError(t, err)
	k := len(trialLines(t, state))
	if k >= n {
		t.Skipf("the study finished (%d trials) before it could be killed", k)
	}
	// A kill can tear the last line; the resume drops it, so compare the
	// whole lines only.
	before = before[:bytes.LastIndexByte(before, '\n')+1]

	res := child("--resume")
	o, err := res.CombinedOutput()
	require.NoError(t, err, "%s", o)
	after, err := os.ReadFile(state)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(after, before), "the lines written before the kill are unchanged")
	ids := trialLines(t, state)
	require.Len(t, ids, n, "every trial is in the file")
	seen := map[int]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "trial %d twice", id)
		seen[id] = true
	}
	t.Logf("killed after %d of %d trials; the resume ran the other %d", k, n, n-k)
}

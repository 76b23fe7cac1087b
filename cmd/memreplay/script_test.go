package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestScripts runs the command lines the README and docs/cli.md show, as a
// user types them, from testdata/script/*.txtar: each script runs in a
// fresh directory with memreplay on its PATH (TestMain) and the
// repository's traces/ linked in, so the documented commands and what they
// print cannot drift apart. Where a documented run takes minutes (a full
// PAR search or study) the script gives it a small search space instead,
// and says so.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", root)
			// The README's paths are relative to the repository root.
			return os.Symlink(filepath.Join(root, "traces"), filepath.Join(env.WorkDir, "traces"))
		},
	})
}

// TestREADMECommandsAreScripted: every memreplay command line in the
// README's shell blocks has a script line for the same command that gives
// all its flags and files (a script may add flags that shrink a run, and
// change flag values such as --trials), so a command added to the README
// without a script, or a flag renamed in one place only, fails here.
func TestREADMECommandsAreScripted(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var scripted [][]string
	files, _ := filepath.Glob(filepath.Join("testdata", "script", "*.txtar"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if _, rest, ok := strings.Cut(l, "exec memreplay "); ok {
				scripted = append(scripted, strings.Fields(rest))
			}
		}
	}
	var lines []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		for _, l := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
			l, _, _ = strings.Cut(l, "#")
			l, _, _ = strings.Cut(l, "&&")
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "memreplay "); ok {
				lines = append(lines, rest)
			}
		}
	}
	if len(lines) < 10 {
		t.Fatalf("found %d memreplay lines in README.md's shell blocks; the parser lost them", len(lines))
	}
	number := regexp.MustCompile(`^[0-9.]+$`)
	for _, l := range lines {
		words := strings.Fields(l)
		var need []string
		for _, w := range words[1:] {
			switch {
			case strings.HasPrefix(w, "--"):
				name, _, _ := strings.Cut(w, "=")
				need = append(need, name)
			case strings.Contains(w, ".") && !number.MatchString(w):
				need = append(need, w) // a file
			}
		}
		found := false
		for _, s := range scripted {
			if s[0] == words[0] && hasAll(s[1:], need) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md: `memreplay %s`: no script line in testdata/script runs %s with %v", l, words[0], need)
		}
	}
}

func hasAll(words, need []string) bool {
	have := map[string]bool{}
	for _, w := range words {
		name, _, _ := strings.Cut(w, "=")
		have[name] = true
	}
	for _, n := range need {
		if !have[n] {
			return false
		}
	}
	return true
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/memreplay/memreplay/sim/study"
)

// optunaSpace reads an Optuna study's search space from its storage, in
// memreplay's spelling, through Optuna itself: python3 -m memreplay.space
// (python/memreplay/space.py). Optuna's storages (SQLite, PostgreSQL,
// MySQL, journal files) and their schema versions are Optuna's business;
// reading them with Optuna keeps this CLI free of database drivers and in
// step with whatever Optuna wrote.
func optunaSpace(storage, name string, fixed, names []string, notes io.Writer) (study.Space, error) {
	py := os.Getenv("MEMREPLAY_PYTHON")
	if py == "" {
		// Debian's python3-optuna installs for /usr/bin/python3; a python3
		// earlier on PATH may be another interpreter without it.
		py = "python3"
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			py = "/usr/bin/python3"
		}
	}
	args := []string{"-m", "memreplay.space", "--storage", storage, "--study", name}
	for _, f := range fixed {
		args = append(args, "--fixed", f)
	}
	for _, n := range names {
		args = append(args, "--name", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && strings.Contains(msg, "No module named memreplay"):
			return study.Space{}, inputError{fmt.Errorf("--optuna-storage: %s cannot import memreplay's Python package: pip install -e python/ or set PYTHONPATH to the checkout's python/ (MEMREPLAY_PYTHON picks the interpreter)", py)}
		case errors.As(err, &ee):
			return study.Space{}, inputError{fmt.Errorf("--optuna-storage: %s", lastLine(msg))}
		}
		return study.Space{}, inputError{fmt.Errorf("--optuna-storage: running %s: %v", py, err)}
	}
	io.Copy(notes, &errb) // what was read, what was ignored
	sp, err := study.ParseSpace(out.Bytes())
	if err != nil {
		return study.Space{}, inputError{fmt.Errorf("--optuna-storage: the study's space: %v", err)}
	}
	return sp, nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// openPTY opens a pseudo-terminal: the program side (a terminal, as a
// person's stderr is) and the side that reads what was drawn.
func openPTY(t *testing.T) (term, reader *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlockpt: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("ptsname: %v", e)
	}
	s, err := os.OpenFile("/dev/pts/"+itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, m
}

func itoa(n uint32) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// onTerminal runs cmd with stderr on a terminal, progress drawn at once
// and at every step, and returns what it drew there.
func onTerminal(t *testing.T, cmd func(args []string, stdout, stderr io.Writer) error, args []string) string {
	term, reader := openPTY(t)
	oldDelay, oldEvery := progressDelay, progressEvery
	progressDelay, progressEvery = 0, 0
	defer func() { progressDelay, progressEvery = oldDelay, oldEvery }()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&got, reader); close(done) }()
	var out bytes.Buffer
	require.NoError(t, cmd(args, &out, term))
	// Closing the terminal side ends the reader's copy (EIO) once it has
	// read everything.
	term.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's reader did not finish")
	}
	return got.String()
}

// parOnTerminal runs par with stderr on a terminal and returns what it drew
// there.
func parOnTerminal(t *testing.T, extra ...string) string {
	// One mix at a time, so that progress is reported between mixes.
	return onTerminal(t, parCmd, append(quickPar(tinySpace(t), "--parallel", "1", "--mixes", "6"), extra...))
}

func TestParProgressOnATerminal(t *testing.T) {
	drawn := parOnTerminal(t)
	require.Contains(t, drawn, "par: ")
	require.Contains(t, drawn, " mixes (")
	require.True(t, strings.HasSuffix(drawn, "\r\x1b[K"), "the line is cleared at the end: %q", drawn)

	require.Empty(t, parOnTerminal(t, "--progress=false"))
}

// On a pipe or a file, par prints no progress whatever --progress says.
func TestParNoProgressOnAPipe(t *testing.T) {
	oldDelay, oldEvery := progressDelay, progressEvery
	progressDelay, progressEvery = 0, 0
	defer func() { progressDelay, progressEvery = oldDelay, oldEvery }()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, parCmd(quickPar(tinySpace(t), "--parallel", "1", "--progress"), &out, w))
	w.Close()
	b, _ := io.ReadAll(r)
	require.Empty(t, string(b))
}

func TestParProgressLine(t *testing.T) {
	var b bytes.Buffer
	now := time.Now()
	p := &progress{w: &b, label: "par", start: now.Add(-10 * time.Second), last: now.Add(-time.Second)}
	p.mixes(32, 128)
	require.Equal(t, "\rpar: 32/128 mixes (25%), 10s, about 30s left   ", b.String())
}

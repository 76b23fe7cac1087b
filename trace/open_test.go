package trace

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A file that is not a trace is named by its first bytes, escaped: no
// raw byte of a binary file (a terminal escape, invalid UTF-8, a bell)
// reaches the message, and an invalid byte is shown as itself (\x8f), not
// as a '?' that reads like a character of the file.
func TestOpenNotATraceEscapes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junk.bin")
	require.NoError(t, os.WriteFile(p, []byte("\x8f\x1b[2J\x07é\x00rest of it"), 0o644))
	_, err := Open(p)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `starts with "\x8f\x1b[2J\a\u00e9\x00rest of"`)
	for i := 0; i < len(msg); i++ {
		require.True(t, msg[i] >= 0x20 && msg[i] < 0x7f, "raw byte %#x at %d in %q", msg[i], i, msg)
	}
}

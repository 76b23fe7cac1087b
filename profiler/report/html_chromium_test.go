package report

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeBrowser writes a shell script that stands in for Chromium: it dies of
// SIGSEGV on its first `crashes` runs (counted in a file beside it), then
// prints a page.
func fakeBrowser(t *testing.T, crashes int) (path, count string) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "chromium")
	count = filepath.Join(dir, "runs")
	script := `#!/bin/sh
echo x >> "` + count + `"
n=$(wc -l < "` + count + `")
if [ "$n" -le ` + strconv.Itoa(crashes) + ` ]; then
	echo "start-up noise" >&2
	kill -SEGV $$
fi
echo '<html><body>drawn</body></html>'
`
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, count
}

func runs(t *testing.T, count string) int {
	b, err := os.ReadFile(count)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func page(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "p.html")
	require.NoError(t, os.WriteFile(p, []byte("<html></html>"), 0o644))
	return p
}

// A browser that segfaults at start-up is started again; the page it then
// draws is returned.
func TestRenderHTMLRetriesACrashedBrowser(t *testing.T) {
	b, count := fakeBrowser(t, crashAttempts-1)
	dom, err := RenderHTML(context.Background(), b, page(t), RenderOptions{})
	require.NoError(t, err)
	assert.Contains(t, dom, "drawn")
	assert.Equal(t, crashAttempts, runs(t, count))
}

// A browser that crashes every time gives up after crashAttempts runs with
// ErrBrowserCrashed and its stderr.
func TestRenderHTMLGivesUpOnABrowserThatAlwaysCrashes(t *testing.T) {
	b, count := fakeBrowser(t, 9)
	_, err := RenderHTML(context.Background(), b, page(t), RenderOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrBrowserCrashed), "%v", err)
	assert.Contains(t, err.Error(), "start-up noise")
	assert.Equal(t, crashAttempts, runs(t, count))
}

// A browser that fails without a signal (a bad flag, a missing library)
// is not retried and is not reported as a crash.
func TestRenderHTMLDoesNotRetryAnExit(t *testing.T) {
	dir := t.TempDir()
	b := filepath.Join(dir, "chromium")
	count := filepath.Join(dir, "runs")
	require.NoError(t, os.WriteFile(b, []byte("#!/bin/sh\necho x >> \""+count+"\"\necho 'no display' >&2\nexit 1\n"), 0o755))
	_, err := RenderHTML(context.Background(), b, page(t), RenderOptions{})
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrBrowserCrashed))
	assert.Contains(t, err.Error(), "no display")
	assert.Equal(t, 1, runs(t, count))
}

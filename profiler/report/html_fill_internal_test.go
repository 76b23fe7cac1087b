package report

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeFilled writes what strings.Replacer made of the page before: the
// real template, a {{ that starts no key, a key at either end.
func TestWriteFilledAsReplacer(t *testing.T) {
	values := map[string]string{"{{TITLE}}": "a &lt; b", "{{SUBTITLE}}": "s", "{{CSS}}": htmlCSS, "{{JS}}": htmlJS,
		"{{DATA}}": `{"x":"{{TITLE}}"}`}
	fill := map[string]func(io.Writer) error{}
	var pairs []string
	for k, v := range values {
		pairs = append(pairs, k, v)
		fill[k] = text(v)
	}
	r := strings.NewReplacer(pairs...)
	for _, page := range []string{htmlPage, "", "plain", "{{TITLE}}", "x{{TITLE}}y{{DATA}}", "{{ {{TITLE}} }} {{NOPE}} {{", "}}{{JS}}}}"} {
		var b bytes.Buffer
		require.NoError(t, writeFilled(&b, page, fill))
		require.Equal(t, r.Replace(page), b.String(), "%q", page[:min(len(page), 40)])
	}
}

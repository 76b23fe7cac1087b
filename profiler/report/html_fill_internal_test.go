package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeFilled writes what strings.Replacer made of the page before: the
// real template, a {{ that starts no key, a key at either end.
func TestWriteFilledAsReplacer(t *testing.T) {
	fill := map[string][]byte{"{{TITLE}}": []byte("a &lt; b"), "{{SUBTITLE}}": []byte("s"),
		"{{CSS}}": []byte(htmlCSS), "{{JS}}": []byte(htmlJS), "{{DATA}}": []byte(`{"x":"{{TITLE}}"}`)}
	var pairs []string
	for k, v := range fill {
		pairs = append(pairs, k, string(v))
	}
	r := strings.NewReplacer(pairs...)
	for _, page := range []string{htmlPage, "", "plain", "{{TITLE}}", "x{{TITLE}}y{{DATA}}", "{{ {{TITLE}} }} {{NOPE}} {{", "}}{{JS}}}}"} {
		var b bytes.Buffer
		require.NoError(t, writeFilled(&b, page, fill))
		require.Equal(t, r.Replace(page), b.String(), "%q", page[:min(len(page), 40)])
	}
}

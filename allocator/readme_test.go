package allocator_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESnippetIsTheExample: the README's "Use it as a library" code is
// the body of Example (example_test.go), which go test compiles and runs.
func TestREADMESnippetIsTheExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)Use it as a library.*?```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no ```go block after \"Use it as a library\"")
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile("(?s)\nfunc Example\\(\\) \\{\n(.*?)\n\\}\n").FindSubmatch(src)
	if body == nil {
		t.Fatal("example_test.go: no func Example")
	}
	var want []string
	for _, l := range strings.Split(string(body[1]), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "// Output:") {
			continue
		}
		want = append(want, strings.TrimPrefix(l, "\t"))
	}
	if got := strings.TrimSpace(string(m[1])); got != strings.TrimSpace(strings.Join(want, "\n")) {
		t.Errorf("README.md's library snippet:\n%s\n\nExample's body (allocator/example_test.go):\n%s", got, strings.Join(want, "\n"))
	}
}

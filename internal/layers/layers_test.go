package layers

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/memreplay/memreplay"

// packages finds every Go package of the module below root, by folder,
// skipping testdata and hidden folders as the go tool does.
func packages(t *testing.T, root string) map[string]*build.Package {
	t.Helper()
	ctx := build.Default
	ctx.CgoEnabled = true
	found := map[string]*build.Package{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		p, err := ctx.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		found[filepath.ToSlash(rel)] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

func own(imports []string) []string {
	var out []string
	for _, imp := range imports {
		if imp == module {
			out = append(out, ".")
		} else if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

// TestLayers holds every import of the module's packages to the layer map:
// each one points down (Allowed), and every package has a place.
func TestLayers(t *testing.T) {
	pkgs := packages(t, moduleRoot(t))
	if len(pkgs) < len(Packages) {
		t.Fatalf("found %d packages, the map places %d: is the walk wrong?", len(pkgs), len(Packages))
	}
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		from, ok := Packages[name]
		if !ok {
			t.Errorf("%s has no place in internal/layers.Packages: put it in the layer it belongs to (see the package comment)", name)
			continue
		}
		p := pkgs[name]
		for _, imp := range own(p.Imports) {
			to, ok := Packages[imp]
			if !ok {
				continue // reported as unplaced
			}
			if !Allowed(from, to) {
				t.Errorf("%s (%s layer, step %d) imports %s (%s layer, step %d): imports point down only",
					name, Names[from.Layer], from.Step, imp, Names[to.Layer], to.Step)
			}
		}
	}
	for name := range Packages {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("internal/layers.Packages places %s, which does not exist: remove it", name)
		}
	}
}

// TestAllowed pins the rule itself, so that a wrong comparison cannot make
// TestLayers pass everything.
func TestAllowed(t *testing.T) {
	cases := []struct {
		from, to string
		want     bool
	}{
		{"sim/replay", "trace", true},
		{"trace", "sim/replay", false},
		{"profiler", "sim/replay", true},
		{"sim/replay", "profiler", false},
		{"allocator", "allocator/config", true},
		{"allocator/config", "allocator", false},
		{"sim/par", "sim/workers", true},
		{"sim/workers", "sim/par", false},
		{"sim/replay", "sim/workers", false}, // same step: no sideways imports
		{"cmd/memreplay", "profiler/report", true},
		{"profiler/report", "cmd/memreplay", false},
	}
	for _, c := range cases {
		if got := Allowed(Packages[c.from], Packages[c.to]); got != c.want {
			t.Errorf("Allowed(%s -> %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

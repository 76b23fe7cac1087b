package profiler

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// hiddenName says what testing each of omitFunctions says: on every
// pattern alone, inside other text, cut short by a byte, and on the
// function names of the real snapshots.
func TestHiddenNameAsPatterns(t *testing.T) {
	byList := func(name string) bool {
		for _, s := range omitFunctions {
			if strings.Contains(name, s) {
				return true
			}
		}
		return false
	}
	names := []string{"", "main", "Py", "gather", "_star", "PyEval", "unwind::unwin"}
	for _, p := range omitFunctions {
		names = append(names, p, "x"+p+"y", p[1:], p[:len(p)-1], strings.ToLower(p))
	}
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"Py", "Eval_", "Object_", "Function_", "_start", "gather", "_with_cpp", "unwind::", "unwind",
		"CapturedTraceback::", "__libc", "_main", "at::", "x"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for k := r.IntN(5); k >= 0; k-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		names = append(names, b.String())
	}
	for _, path := range realSnapshotFiles() {
		tr, err := trace.ReadPyTorchFile(path)
		require.NoError(t, err)
		for i := 0; i < tr.Stacks.NumFrames(); i++ {
			names = append(names, tr.Stacks.Frame(uint32(i)).Name)
		}
	}
	for _, n := range names {
		require.Equal(t, byList(n), hiddenName(n), "%q", n)
	}
}

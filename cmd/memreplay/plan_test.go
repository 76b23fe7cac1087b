package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/placement"
)

const planProblem = "id,lower,upper,size\n0,0,3,4\n1,3,9,4\n2,0,9,4\n3,9,21,4\n4,0,21,4\n"

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestPlanCSV(t *testing.T) {
	in := writeTemp(t, "p.csv", planProblem)
	code, stdout, stderr := runCLI("plan", in)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "id,lower,upper,size,offset\n"), stdout)
	require.Contains(t, stderr, "5 buffers, peak 12 bytes, lower bound 12 bytes (optimal: the lower bound)")
	bufs, offs, err := placement.ReadCSV(strings.NewReader(stdout), "stdout")
	require.NoError(t, err)
	require.Len(t, offs, 5)
	peak, err := placement.Verify(bufs, offs)
	require.NoError(t, err)
	require.Equal(t, uint64(12), peak)

	// Its own output reads back as a problem (the offset column is ignored).
	again := writeTemp(t, "again.csv", stdout)
	out := filepath.Join(t.TempDir(), "sol.csv")
	code, stdout, stderr = runCLI("plan", "-q", "-o", out, again)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
	require.Empty(t, stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(b), ",offset\n")
}

func TestPlanJSON(t *testing.T) {
	in := writeTemp(t, "p.csv", "buffer,start,end,size,alignment\na,0,1,3,1\nb,1,2,8,8\n")
	code, stdout, stderr := runCLI("plan", "--format", "json", in)
	require.Equal(t, 0, code, stderr)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	for _, k := range []string{"peak_bytes", "lower_bound_bytes", "optimal", "buffers", "seconds", "offsets"} {
		require.Contains(t, res, k)
	}
	// a lives [0,2) and b [1,3): b aligned at 0, a above it at 8.
	require.Equal(t, 11.0, res["peak_bytes"])
	require.Equal(t, 11.0, res["lower_bound_bytes"])
	require.Equal(t, true, res["optimal"])
	require.Equal(t, 2.0, res["buffers"])
	require.Equal(t, []any{8.0, 0.0}, res["offsets"])
}

func TestPlanBadInput(t *testing.T) {
	bad := writeTemp(t, "bad.csv", "id,lower,upper,size\n0,0,3,4\n1,5,2,4\n")
	code, _, stderr := runCLI("plan", bad)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, bad+":3: column upper: upper 2 <= lower 5")

	code, _, stderr = runCLI("plan", filepath.Join(t.TempDir(), "missing.csv"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "missing.csv")

	for _, args := range [][]string{
		{"plan"},
		{"plan", "a.csv", "b.csv"},
		{"plan", "--from-trace", "t.pickle", "a.csv"},
		{"plan", "--device", "1", "a.csv"},
		{"plan", "--format", "xml", "a.csv"},
		{"plan", "--time-limit", "-1s", "a.csv"},
	} {
		code, _, stderr := runCLI(args...)
		require.Equal(t, 2, code, args)
		require.NotEmpty(t, stderr, args)
	}
	code, stdout, _ := runCLI("help", "plan")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "memreplay plan ")
	require.Contains(t, usage, "memreplay plan ")
}

// A real trace's blocks: the plan verifies, is at or above the live bytes,
// and within 2% of them (docs/plan.md).
func TestPlanFromTrace(t *testing.T) {
	tr := filepath.Join("..", "..", "traces", "pytorch", "cs336_silmont2000_memory_forward_fp32_128.pickle")
	out := filepath.Join(t.TempDir(), "plan.csv")
	code, _, stderr := runCLI("plan", "--from-trace", tr, "--time-limit", "1s", "-o", out)
	require.Equal(t, 0, code, stderr)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	bufs, offs, err := placement.ReadCSV(f, out)
	require.NoError(t, err)
	// The trace's 681 allocs and the 137 blocks alive before its first
	// event (reconstructed: it is a partial trace), each once.
	require.Len(t, bufs, 681+137)
	peak, err := placement.Verify(bufs, offs)
	require.NoError(t, err)
	sol, err := placement.Solve(bufs, placement.Options{NodeLimit: -1})
	require.NoError(t, err)
	require.GreaterOrEqual(t, peak, sol.LowerBound)
	require.LessOrEqual(t, float64(peak), 1.02*float64(sol.LowerBound))
	// The lower bound is the trace's peak of 512-byte-rounded live bytes:
	// between PyTorch's requested and allocated peaks for this trace.
	require.GreaterOrEqual(t, sol.LowerBound, uint64(556843008))
	require.LessOrEqual(t, sol.LowerBound, uint64(560939008))

	code, _, stderr = runCLI("plan", "--from-trace", tr, "--device", "3")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--device 3")
}

// A placement that does not verify is never printed: exit 2, saying it is
// a bug.
func TestPlanRefusesWrongPlacement(t *testing.T) {
	defer func(f func([]placement.Buffer, placement.Options) (placement.Solution, error)) { solvePlacement = f }(solvePlacement)
	solvePlacement = func(bufs []placement.Buffer, opts placement.Options) (placement.Solution, error) {
		sol, err := placement.Solve(bufs, opts)
		sol.Offsets[1] = sol.Offsets[2] // buffers 1 and 2 are alive together over [3, 9)
		return sol, err
	}
	in := writeTemp(t, "p.csv", planProblem)
	out := filepath.Join(t.TempDir(), "sol.csv")
	code, stdout, stderr := runCLI("plan", "-o", out, in)
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "internal error, the placement found does not verify")
	require.Contains(t, stderr, "overlap in time and address")
	require.NoFileExists(t, out)
}

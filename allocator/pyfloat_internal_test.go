package allocator

import "testing"

func TestPyFloatMatchesPythonRepr(t *testing.T) {
	for f, want := range map[float64]string{
		2: "2.0", 1.5: "1.5", -0.1: "-0.1", 1e16: "1e+16", 2e6: "2000000.0", 1e-5: "1e-05", 0.0001: "0.0001",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

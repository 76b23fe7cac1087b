package placement

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzReadCSV: any input is read or refused with a CSVError, never a
// panic; what is read is a valid problem, and writing it back reads the
// same problem.
func FuzzReadCSV(f *testing.F) {
	f.Add("id,lower,upper,size\n0,0,3,4\n1,3,9,4\n")
	f.Add("buffer,start,end,size\nb1,0,3,4\nb2,3,9,4\n")
	f.Add("id,lower,upper,size,alignment,offset\nx,1,2,16,8,0\n")
	f.Add("id,lower,upper,size\n\"a,b\",0,1,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		bufs, offs, err := ReadCSV(strings.NewReader(in), "f.csv")
		if err != nil {
			if _, ok := err.(*CSVError); !ok {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if err := Check(bufs); err != nil {
			t.Fatalf("read an invalid problem: %v", err)
		}
		if offs != nil && len(offs) != len(bufs) {
			t.Fatalf("%d offsets, %d buffers", len(offs), len(bufs))
		}
		var w bytes.Buffer
		if err := WriteCSV(&w, bufs, offs); err != nil {
			t.Fatal(err)
		}
		back, offs2, err := ReadCSV(&w, "w.csv")
		if err != nil {
			t.Fatalf("reading back %q: %v", w.String(), err)
		}
		if len(back) != len(bufs) || len(offs2) != len(offs) {
			t.Fatalf("round trip: %d buffers, %d back", len(bufs), len(back))
		}
		for i := range bufs {
			a, b := bufs[i], back[i]
			a.Alignment, b.Alignment = max(a.Alignment, 1), max(b.Alignment, 1)
			if a != b {
				t.Fatalf("round trip: %+v became %+v", a, b)
			}
		}
	})
}

// FuzzSolve: on any problem the placement verifies, its peak is between
// the bounds, and on small problems an optimality claim is the true
// optimum.
func FuzzSolve(f *testing.F) {
	f.Add([]byte{0, 3, 4, 0, 3, 6, 4, 0, 0, 9, 4, 0})
	f.Add([]byte{1, 2, 200, 3, 2, 5, 7, 1, 4, 1, 9, 2, 0, 7, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var bufs []Buffer
		for i := 0; i+3 < len(data) && len(bufs) < 9; i += 4 {
			lo := int64(data[i] % 16)
			bufs = append(bufs, Buffer{ID: fmt.Sprint(len(bufs)), Lower: lo, Upper: lo + 1 + int64(data[i+1]%8),
				Size: 1 + uint64(data[i+2]), Alignment: 1 << (data[i+3] % 5)})
		}
		sol, err := Solve(bufs, Options{NodeLimit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		peak, err := Verify(bufs, sol.Offsets)
		if err != nil {
			t.Fatal(err)
		}
		if peak != sol.Peak || sol.Peak < sol.Proven || sol.Proven < sol.LowerBound || sol.Optimal != (sol.Peak == sol.Proven) {
			t.Fatalf("peak %d (verified %d), proven %d, lower bound %d, optimal %v", sol.Peak, peak, sol.Proven, sol.LowerBound, sol.Optimal)
		}
		if len(bufs) <= 6 {
			opt := bruteForce(bufs)
			if sol.Peak < opt || sol.Proven > opt || (sol.Optimal && sol.Peak != opt) {
				t.Fatalf("optimum %d, got peak %d proven %d optimal %v", opt, sol.Peak, sol.Proven, sol.Optimal)
			}
		}
	})
}

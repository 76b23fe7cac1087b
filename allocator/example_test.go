package allocator_test

import (
	"fmt"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
)

// The README's "Use it as a library" is this function's body, word for
// word: go test compiles and runs it, so the snippet cannot drift.
func Example() {
	card, _ := gpu.New(gpu.Options{Capacity: 24 << 30}) // a simulated 24 GiB GPU (sim/gpu)
	proc, _ := card.NewProcess()
	cfg, _ := config.Parse("expandable_segments:True")
	a, _ := allocator.New(proc, cfg)
	b, err := a.Malloc(3<<20, 0) // 3 MiB on the default stream
	if err != nil {
		panic(err)
	}
	_ = a.Free(b)
	st := a.Stats()
	fmt.Println(st.Map()["reserved_bytes.all.peak"]) // one 20 MiB page: large blocks map 20 MiB at a time
	// Output: 20971520
}

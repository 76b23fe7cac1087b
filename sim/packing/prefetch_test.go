package packing

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/trial"
)

func TestPrefetchAsksEverySpecOnceAndStops(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	all := make(chan struct{})
	var specs []trial.Spec
	for b := 1; b <= 20; b++ {
		specs = append(specs, trial.Spec{Model: trial.Model{Name: fmt.Sprint("m", b)}, Batch: b})
	}
	pred := func(s trial.Spec) uint64 {
		mu.Lock()
		defer mu.Unlock()
		asked[s.String()]++
		if len(asked) == len(specs) {
			close(all)
		}
		return 1
	}
	stop := Prefetch(pred, specs, 3)
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("the prefetch did not ask for every spec")
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, asked, len(specs))
	for k, c := range asked {
		assert.Equal(t, 1, c, k)
	}
}

func TestPrefetchStopWaits(t *testing.T) {
	var mu sync.Mutex
	n, after := 0, 0
	stopped := false
	var specs []trial.Spec
	for b := 1; b <= 1000; b++ {
		specs = append(specs, trial.Spec{Model: trial.Model{Name: "m"}, Batch: b})
	}
	stop := Prefetch(func(trial.Spec) uint64 {
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		n++
		if stopped {
			after++
		}
		return 1
	}, specs, 2)
	time.Sleep(5 * time.Millisecond)
	stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Less(t, n, len(specs), "stop ended the prefetch early")
	assert.Zero(t, after, "nothing is asked after stop returns")
}

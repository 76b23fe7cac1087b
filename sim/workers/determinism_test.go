package workers_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/sim/gpu"
	"github.com/memreplay/memreplay/sim/workers"
	"github.com/memreplay/memreplay/trace"
)

// mixed runs four workers on trials of random shapes near the GPU's limit,
// so that OOMs, retries and prunes all happen, and returns what it reported.
func mixed(t *testing.T, seed uint64, conf string) ([]workers.TaskResult, workers.Summary) {
	t.Helper()
	cfg, err := config.Parse(conf)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 1))
	lists := make([][]*trace.Trace, 4)
	var stagger []time.Duration
	for w := range lists {
		for i := 0; i < 3; i++ {
			lists[w] = append(lists[w], training("t", rng.Uint64(), 6, 3, (8+rng.Uint64N(40))*miB))
		}
		stagger = append(stagger, time.Duration(rng.Int64N(int64(20*time.Millisecond))))
	}
	var rs []workers.TaskResult
	sum, err := workers.Run(workers.Options{
		GPU: gpu.Options{Capacity: 3 * giB}, Alloc: &cfg, Workers: 4, Stagger: stagger,
		Compute: workers.Compute{Share: 0.5},
		// A worker whose context does not fit tries again with its next trial.
		Policy: workers.Policy{RestartOnStickyError: true},
		Next:   queue(lists...),
		Done: func(r workers.TaskResult) error {
			r.Task.Open = nil // funcs never compare equal
			rs = append(rs, r)
			return nil
		},
	})
	require.NoError(t, err)
	return rs, sum
}

func TestSameOptionsSameRun(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		a, sa := mixed(t, 42, conf)
		b, sb := mixed(t, 42, conf)
		assert.Equal(t, a, b, conf)
		assert.Equal(t, sa, sb, conf)
		assert.Equal(t, 12, sa.Tasks, "%+v", sa)
		assert.Positive(t, sa.PrunedOOM, "the mix is meant to run out of memory (%s)", conf)
		c, _ := mixed(t, 43, conf)
		assert.NotEqual(t, a, c, "another seed, another run")
	}
}

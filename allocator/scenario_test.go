package allocator_test

// Scenario tests: each file in testdata/scenarios is a list of commands run
// against one allocator on a simulated GPU, with the trace entries each
// command caused and the resulting layout and statistics written beside it.
// The runner and the commands are in allocator/internal/scenario, shared
// with allocator/cuda, which runs the same files on the CUDA backend over
// its fake driver; here the device is a gpu.Process.

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/internal/scenario"
	"github.com/memreplay/memreplay/sim/gpu"
)

func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/scenarios", func(t *testing.T) scenario.Harness { return &simHarness{} })
}

// simHarness is a process on a simulated GPU: the device the expected
// outputs are written for.
type simHarness struct {
	gpu  *gpu.GPU
	proc *gpu.Process
}

func (h *simHarness) Init(capacity, granularity, context uint64) (allocator.Device, error) {
	card, err := gpu.New(gpu.Options{Capacity: capacity, Granularity: granularity,
		ContextOverhead: context, NoContextOverhead: context == 0})
	if err != nil {
		return nil, err
	}
	proc, err := card.NewProcess()
	if err != nil {
		return nil, err
	}
	h.gpu, h.proc = card, proc
	return proc, nil
}

func (h *simHarness) CompleteStream(s allocator.Stream) { h.proc.CompleteEvents(s) }
func (h *simHarness) CompleteAll()                      { h.proc.CompleteAllEvents() }
func (h *simHarness) FailMalloc(n int)                  { h.proc.FailMalloc(n) }
func (h *simHarness) FailCreatePage(n int)              { h.proc.FailCreatePage(n) }
func (h *simHarness) ErrText(err error) string          { return "error: " + err.Error() }
func (h *simHarness) Output(s string) string            { return s }
func (h *simHarness) Close()                            {}

func (h *simHarness) Sticky(name string) bool {
	h.proc.InjectStickyError(name)
	return true
}

func (h *simHarness) Device() string {
	cs := h.proc.Counters()
	var calls []string
	for _, call := range gpu.Calls() {
		if n := cs.Get(call).Calls; n > 0 {
			calls = append(calls, fmt.Sprintf("%s=%d", call, n))
		}
	}
	sort.Strings(calls)
	return fmt.Sprintf("used=%s free=%s\ncalls: %s", scenario.FormatSize(h.gpu.Used()),
		scenario.FormatSize(h.gpu.Free()), strings.Join(calls, " "))
}

package cuda

// The allocator's scenario suite (../testdata/scenarios, runner and
// commands in allocator/internal/scenario) on the cuda Device over the fake
// driver instead of sim. The expected outputs are sim's; the same text must
// come out, with three translations that only rename:
//
//   - addresses: the fake hands out the same offsets from its arena's base
//     as sim from its address base (both first fit with the same
//     alignments), so every address inside the arena is printed rebased to
//     gpu.DefaultAddressBase;
//   - device errors: sim names runtime calls the runtime's way
//     ("cudaMalloc failed: cudaErrorAssert"), the driver "cuMemAlloc_v2
//     failed: CUDA_ERROR_ASSERT"; the text is rewritten to sim's names;
//   - the `device` command: the fake's call counters under sim's call names
//     (cuMemAlloc_v2 is cudaMalloc; sim counts the device synchronisation
//     of each successful cudaFree as cudaDeviceSynchronize). Calls sim does
//     not model (cuCtxGetCurrent, cuEventCreate, ...) are left out.

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/internal/scenario"
	"github.com/memreplay/memreplay/sim/gpu"
)

func TestScenariosOnFakeDriver(t *testing.T) {
	if f := flag.Lookup("rewrite"); f != nil && f.Value.String() == "true" {
		t.Skip("-rewrite: the expected outputs are sim's; rewrite them from allocator's own tests")
	}
	scenario.Run(t, "../testdata/scenarios", func(t *testing.T) scenario.Harness { return &fakeHarness{t: t} })
}

type fakeHarness struct {
	t    *testing.T
	fake *fake
	dev  *Device
}

func (h *fakeHarness) Init(capacity, granularity, context uint64) (allocator.Device, error) {
	h.Close()
	h.fake = needFake(h.t, capacity, granularity, context)
	dev, err := h.fake.drv.Device(0)
	if err != nil {
		return nil, err
	}
	h.dev = dev
	return dev, nil
}

func (h *fakeHarness) Close() {
	if h.dev != nil {
		h.dev.Close()
		h.dev = nil
	}
}

func (h *fakeHarness) CompleteStream(s allocator.Stream) { h.fake.completeStream(uint64(s)) }
func (h *fakeHarness) CompleteAll()                      { h.fake.completeAll() }
func (h *fakeHarness) FailMalloc(n int)                  { h.fake.fail("cuMemAlloc_v2", n, codeOutOfMemory) }
func (h *fakeHarness) FailCreatePage(n int)              { h.fake.fail("cuMemCreate", n, codeOutOfMemory) }

func (h *fakeHarness) Sticky(name string) bool {
	code, ok := stickyByName[name]
	if ok {
		h.fake.sticky(code, 0)
	}
	return ok
}

var hexRE = regexp.MustCompile(`0x[0-9a-f]+`)

// Output prints the fake's addresses as sim's: same offset, sim's base.
func (h *fakeHarness) Output(out string) string {
	base, size := h.fake.stat("arena"), h.fake.stat("arena_size")
	return hexRE.ReplaceAllStringFunc(out, func(x string) string {
		v, err := strconv.ParseUint(x[2:], 16, 64)
		if err != nil || v < base || v-base >= size {
			return x
		}
		return fmt.Sprintf("%#x", v-base+gpu.DefaultAddressBase)
	})
}

// simCalls renames the driver calls to sim's call names (sim/gpu/cost.go).
var simCalls = map[string]string{
	"cuMemAlloc_v2":       "cudaMalloc",
	"cuMemFree_v2":        "cudaFree",
	"cuMemGetInfo_v2":     "cudaMemGetInfo",
	"cuEventRecord":       "cudaEventRecord",
	"cuEventQuery":        "cudaEventQuery",
	"cuEventSynchronize":  "cudaEventSynchronize",
	"cuStreamSynchronize": "cudaStreamSynchronize",
	"cuMemAddressReserve": "cuMemAddressReserve",
	"cuMemAddressFree":    "cuMemAddressFree",
	"cuMemCreate":         "cuMemCreate",
	"cuMemMap":            "cuMemMap",
	"cuMemSetAccess":      "cuMemSetAccess",
	"cuMemUnmap":          "cuMemUnmap",
	"cuMemRelease":        "cuMemRelease",
}

// runtimeNames are the runtime API's spellings of the codes the scenarios
// meet, which sim uses for runtime calls (sim/gpu/errors.go).
var runtimeNames = map[int]string{
	1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 400: "cudaErrorInvalidResourceHandle",
	700: "cudaErrorIllegalAddress", 710: "cudaErrorAssert", 714: "cudaErrorHardwareStackError",
	715: "cudaErrorIllegalInstruction", 716: "cudaErrorMisalignedAddress", 717: "cudaErrorInvalidAddressSpace",
	718: "cudaErrorInvalidPc", 719: "cudaErrorLaunchFailure", 999: "cudaErrorUnknown",
}

// stickyByName finds the code of `sticky NAME` in either spelling; no name
// is a device-side assert, as in sim.
var stickyByName = func() map[string]int {
	m := map[string]int{"": 710}
	for code, name := range runtimeNames {
		if IsStickyCode(code) {
			m[name] = code
		}
	}
	for name, code := range map[string]int{"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_ASSERT": 710,
		"CUDA_ERROR_HARDWARE_STACK_ERROR": 714, "CUDA_ERROR_ILLEGAL_INSTRUCTION": 715,
		"CUDA_ERROR_MISALIGNED_ADDRESS": 716, "CUDA_ERROR_INVALID_ADDRESS_SPACE": 717,
		"CUDA_ERROR_INVALID_PC": 718, "CUDA_ERROR_LAUNCH_FAILED": 719} {
		m[name] = code
	}
	return m
}()

// ErrText renders err with any device error in it under sim's names.
func (h *fakeHarness) ErrText(err error) string {
	text := err.Error()
	var de *allocator.DeviceError
	if errors.As(err, &de) {
		sd := *de
		if name, ok := simCalls[de.Call]; ok {
			sd.Call = name
			if strings.HasPrefix(name, "cuda") {
				if rn, ok := runtimeNames[de.Code]; ok {
					sd.Name = rn
				}
			}
		}
		text = strings.Replace(text, de.Error(), sd.Error(), 1)
	}
	return "error: " + text
}

func (h *fakeHarness) Device() string {
	counts := map[string]int64{}
	for drv, name := range simCalls {
		if n := h.fake.count(drv); n > 0 {
			counts[name] += n
		}
	}
	if n := h.fake.count("cuMemFree_v2") - h.fake.failures("cuMemFree_v2") + h.fake.count("cuCtxSynchronize"); n > 0 {
		counts["cudaDeviceSynchronize"] = n
	}
	var calls []string
	for name, n := range counts {
		calls = append(calls, fmt.Sprintf("%s=%d", name, n))
	}
	sort.Strings(calls)
	used := h.fake.stat("used")
	return fmt.Sprintf("used=%s free=%s\ncalls: %s", scenario.FormatSize(used),
		scenario.FormatSize(h.fake.stat("capacity")-used), strings.Join(calls, " "))
}

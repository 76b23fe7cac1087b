package report_test

import (
	"bytes"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler/report"
	"github.com/memreplay/memreplay/sim/replay"
	"github.com/memreplay/memreplay/trace"
)

// recordTwinSites records three sites that share their innermost Python
// frame (the line of torch's Module._apply that copies a parameter, under
// a Windows path as long as a virtual environment's) and differ further
// out, as three model.to() calls of a real trace do, two C++ sites whose
// long names differ only at the end, each holding memory at the peak, and
// a site of its own.
func recordTwinSites(t *testing.T) *trace.Trace {
	t.Helper()
	cfg := config.Default()
	a := newAllocator(t, 1<<30, cfg)
	st := trace.NewStacks()
	const torchDir = `C:\research\memory-study\.venv\Lib\site-packages\torch\nn\modules\`
	convert := trace.Frame{Name: "convert", Filename: torchDir + "module.py", Line: 1326}
	apply := trace.Frame{Name: "_apply", Filename: torchDir + "module.py", Line: 942}
	stack := func(outer ...trace.Frame) trace.StackID {
		return st.Intern(append([]trace.Frame{convert, apply}, outer...))
	}
	train := func(name string, line int64) trace.Frame {
		return trace.Frame{Name: name, Filename: `C:\research\memory-study\train.py`, Line: line}
	}
	twins := []trace.StackID{stack(train("load_encoder", 31)), stack(train("load_decoder", 44)), stack(train("load_head", 57))}
	other := st.Intern([]trace.Frame{train("forward", 90)})
	// Two C++-only sites whose names share their first 80 characters.
	kernel := func(args string) trace.StackID {
		return st.Intern([]trace.Frame{{Name: "void at::native::(anonymous namespace)::launch_cutlass_grouped_gemm_with_epilogue_fusion_kernel" + args}})
	}
	twins = append(twins, kernel("<float, 128>"), kernel("<c10::Half, 64>"))
	tr := &trace.Trace{Header: trace.Header{Source: "memreplay", SourceFile: "twins.mrt", AllocatorSettings: cfg.AllocatorSettings(),
		Devices: []trace.Device{{Index: 0, Capacity: 1 << 30}}}, Stacks: st}
	rec := replay.Record(a, 0, func(e *trace.Event) { tr.Events = append(tr.Events, *e) })
	for i, s := range twins {
		rec.SetStack(s)
		for j := 0; j < 3; j++ {
			_, err := a.Malloc(uint64(8*(i+1)+j)*MiB, 0)
			require.NoError(t, err)
		}
	}
	rec.SetStack(other)
	for j := 0; j < 4; j++ {
		b, err := a.Malloc(5*MiB, 0)
		require.NoError(t, err)
		if j%2 == 0 {
			require.NoError(t, a.Free(b))
		}
	}
	rec.Stop()
	tr.Final = replay.SnapshotSegments(a.Snapshot())
	tr.HasFinal = true
	return tr
}

// TestHTMLSiteNamesAsTable: the page names the sites as the terminal table
// does, "[stack N]" included where two would read the same, and the
// three twins by distinct names.
func TestHTMLSiteNamesAsTable(t *testing.T) {
	in := replayed(t, recordTwinSites(t), nil, false)
	var table bytes.Buffer
	require.NoError(t, report.WriteTable(&table, in))
	d := pageData(t, writePage(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}))
	run := d["runs"].([]any)[0].(map[string]any)
	sites := run["sites"].(map[string]any)
	seen := map[string]bool{}
	twins := 0
	for _, s := range sites {
		name := s.(map[string]any)["name"].(string)
		assert.False(t, seen[name], "two sites named %q", name)
		seen[name] = true
		if strings.HasPrefix(name, "convert (") {
			twins++
			assert.Regexp(t, `^convert \(module\.py:1326\) \[stack \d+\]$`, name)
		}
		if strings.HasSuffix(name, ">") {
			twins++
		}
		assert.Contains(t, table.String(), name, "the table names the site so too")
	}
	assert.Equal(t, 5, twins)
}

var legendRE = regexp.MustCompile(`<text [^>]*class="legend"[^>]*>([^<]*)`)

// TestBrowserSiteNames: the segment map's legend tells the sites apart:
// twins by their "[stack N]", long names cut in the middle so that their
// distinguishing ends stay; the site tables name them as the terminal
// table does.
func TestBrowserSiteNames(t *testing.T) {
	in := replayed(t, recordTwinSites(t), nil, false)
	_, dom := render(t, &report.HTMLReport{Runs: []report.HTMLRun{{Label: "recorded", Input: in}}}, "site-names", "")
	figs, err := report.ExtractFigures(dom)
	require.NoError(t, err)
	var labels []string
	for _, m := range legendRE.FindAllStringSubmatch(string(figs["segments-0"]), -1) {
		labels = append(labels, html.UnescapeString(m[1]))
	}
	require.Len(t, labels, 4+6, "four states and six sites: %q", labels)
	sites := labels[4:]
	seen := map[string]bool{}
	for _, l := range sites {
		assert.False(t, seen[l], "legend says %q twice: %q", l, sites)
		seen[l] = true
		assert.LessOrEqual(t, len([]rune(l)), 48, l)
	}
	var stacks, kernels int
	for _, l := range sites {
		if regexp.MustCompile(`^convert \(module\.py:1326\) \[stack \d+\]$`).MatchString(l) {
			stacks++
		}
		if strings.Contains(l, "\u2026") && (strings.HasSuffix(l, "<float, 128>") || strings.HasSuffix(l, "<c10::Half, 64>")) {
			kernels++
		}
	}
	assert.Equal(t, 3, stacks, "%q", sites)
	assert.Equal(t, 2, kernels, "long names keep their ends: %q", sites)

	var table bytes.Buffer
	require.NoError(t, report.WriteTable(&table, in))
	for _, m := range regexp.MustCompile(`\[stack \d+\]`).FindAllString(table.String(), -1) {
		assert.Contains(t, dom, m+"</summary>", "the page's site table names %s as the terminal's does", m)
	}
}

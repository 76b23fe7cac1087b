package profiler

import (
	"strconv"
	"strings"

	"github.com/memreplay/memreplay/trace"
)

// PyTorch's torch/cuda/_memory_viz.py (_frame_filter) hides these frames
// from its views: the unwinder, the dispatcher's generated wrappers and the
// Python interpreter's C frames. They appear in every C++-captured stack and
// would make every site look alike.
var (
	omitFunctions = []string{"unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp",
		"_start", "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"}
	omitFilenames = []string{"core/boxing", "/Register", "/Redispatch", "pythonrun.c",
		"Modules/main.c", "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h",
		"ceval.c", "cpython/abstract.h"}
)

// hidden reports whether memory_viz would hide the frame.
func hidden(f trace.Frame) bool { return hiddenName(f.Name) || hiddenFile(f.Filename) }

// hiddenName is whether name contains one of omitFunctions, in fewer
// passes over it than one per pattern (a report tests every distinct
// function name of its sites' stacks): "__libc_start_main" contains
// "_start", and the other patterns share "Py" or "gather", so only a name
// with one of those is tested further. TestHiddenNameAsPatterns checks it
// against the list.
func hiddenName(name string) bool {
	if strings.Contains(name, "_start") || strings.Contains(name, "unwind::unwind") {
		return true
	}
	if strings.Contains(name, "Py") &&
		(strings.Contains(name, "PyEval_") || strings.Contains(name, "PyObject_") || strings.Contains(name, "PyFunction_")) {
		return true
	}
	return strings.Contains(name, "gather") &&
		(strings.Contains(name, "CapturedTraceback::gather") || strings.Contains(name, "gather_with_cpp"))
}

func hiddenFile(filename string) bool {
	for _, s := range omitFilenames {
		if strings.Contains(filename, s) {
			return true
		}
	}
	return false
}

// allocatorFrame reports whether the frame is the caching allocator's own
// (its malloc entry points): the innermost frames of every C++ stack, which
// say nothing about who asked.
func allocatorFrame(f trace.Frame) bool { return allocatorName(f.Name) || allocatorFile(f.Filename) }

func allocatorName(name string) bool { return strings.Contains(name, "CachingAllocator") }

func allocatorFile(filename string) bool { return strings.Contains(filename, "CUDACachingAllocator") }

// TrimFrames returns frames (innermost first) without the frames PyTorch's
// memory_viz hides and without the allocator's own frames at the innermost
// end. A stack made only of such frames is returned whole, so that no site
// loses its identity.
func TrimFrames(frames []trace.Frame) []trace.Frame {
	out := make([]trace.Frame, 0, len(frames))
	for _, f := range frames {
		if hidden(f) || (len(out) == 0 && allocatorFrame(f)) {
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return frames
	}
	return out
}

// SiteFrame picks a site's most telling frame: the innermost Python frame
// (the user's line that allocated); without one, the innermost frame
// TrimFrames keeps that is not tensor-allocation plumbing (the empty_*
// factories, the dispatcher's _ops and wrapper layers), so that a C++-only
// stack from the autograd engine is named by what asked for the tensor;
// else the innermost frame TrimFrames keeps. ok is false for no frames.
func SiteFrame(frames []trace.Frame) (f trace.Frame, ok bool) {
	for _, f := range frames {
		if strings.HasSuffix(f.Filename, ".py") {
			return f, true
		}
	}
	t := TrimFrames(frames)
	for _, f := range t {
		if !plumbing(f.Name) {
			return f, true
		}
	}
	if len(t) > 0 {
		return t[0], true
	}
	return trace.Frame{}, false
}

var plumbingPrefixes = []string{"at::_ops::", "c10::impl::", "at::(anonymous namespace)::", "at::detail::",
	"at::TensorIteratorBase::", "at::meta::", "at::TensorBase at::detail::"}

// plumbing reports whether a C++ frame only carries a tensor allocation
// through ATen's layers.
func plumbing(name string) bool {
	if strings.Contains(shortName(name), "empty") {
		return true
	}
	for _, p := range plumbingPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// SiteLabel names a site by FormatFrame of its SiteFrame, "<no stack>"
// without frames.
func SiteLabel(frames []trace.Frame) string {
	if f, ok := SiteFrame(frames); ok {
		return FormatFrame(f)
	}
	return "<no stack>"
}

// ShortFrame renders a frame for narrow tables: a C++ name without its
// parameter list, and the file's base name (after the last / or \: a
// trace recorded on Windows names its files with backslashes).
func ShortFrame(f trace.Frame) string {
	g := f
	g.Name = shortName(f.Name)
	if i := strings.LastIndexAny(g.Filename, `/\`); i >= 0 {
		g.Filename = g.Filename[i+1:]
	}
	return FormatFrame(g)
}

// shortName drops a C++ signature's trailing parameter list (and a const
// qualifier): "ns::f<T>(int, std::vector<int>) const" -> "ns::f<T>".
func shortName(name string) string {
	s := strings.TrimSuffix(name, " const")
	if !strings.HasSuffix(s, ")") {
		return name
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				if i == 0 || strings.HasSuffix(s[:i], "operator") {
					return name
				}
				return s[:i]
			}
		}
	}
	return name
}

// FormatFrame renders a frame as "name (file:line)", without the line when
// it is unknown (0) and without the parenthesis when the file is.
func FormatFrame(f trace.Frame) string {
	name := f.Name
	if name == "" {
		name = "??"
	}
	if f.Filename == "" || f.Filename == "??" {
		if f.Line > 0 {
			return name + " (:" + strconv.FormatInt(f.Line, 10) + ")"
		}
		return name
	}
	if f.Line > 0 {
		return name + " (" + f.Filename + ":" + strconv.FormatInt(f.Line, 10) + ")"
	}
	return name + " (" + f.Filename + ")"
}

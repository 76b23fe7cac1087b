package profiler

import (
	"strings"

	"github.com/memreplay/memreplay/trace"
)

// siteFrames gives Finish's site table its labels and trimmed frames with
// each distinct frame classified and formatted once. Real snapshots have
// thousands of stacks of 20 to 100 frames drawn from far fewer distinct
// frames, and TrimFrames tests every frame of every stack against
// memory_viz's eighteen substrings: computed per stack, that was 12% of a
// report's time on the real snapshots (docs/performance.md). The results
// are exactly SiteLabel's and TrimFrames' (TestSiteFramesMatchTrimFrames).
type siteFrames struct {
	stacks *trace.Stacks
	info   []frameInfo // by frame index
	trim   []uint32    // scratch
	// The tests on a frame's name and on its file, each made once: the
	// frames of a stack table are mostly the same functions at other
	// lines, and the same files.
	names map[string]nameInfo
	files map[string]fileInfo
	// strs is where the sites' frame lists are carved from.
	strs []string
}

type nameInfo struct{ hidden, allocator, plumbing bool }

type fileInfo struct{ hidden, allocator, python bool }

type frameInfo struct {
	done      bool
	hidden    bool // memory_viz hides it
	allocator bool // the allocator's own entry point
	python    bool // a .py file: SiteFrame's first choice
	plumbing  bool
	text      string // FormatFrame, once asked for (text)
	formatted bool
}

func newSiteFrames(s *trace.Stacks) *siteFrames {
	return &siteFrames{stacks: s, info: make([]frameInfo, s.NumFrames()),
		names: map[string]nameInfo{}, files: map[string]fileInfo{}}
}

func (c *siteFrames) frame(i uint32) *frameInfo {
	fi := &c.info[i]
	if !fi.done {
		f := c.stacks.Frame(i)
		n, ok := c.names[f.Name]
		if !ok {
			n = nameInfo{hidden: hiddenName(f.Name), allocator: allocatorName(f.Name), plumbing: plumbing(f.Name)}
			c.names[f.Name] = n
		}
		l, ok := c.files[f.Filename]
		if !ok {
			l = fileInfo{hidden: hiddenFile(f.Filename), allocator: allocatorFile(f.Filename),
				python: strings.HasSuffix(f.Filename, ".py")}
			c.files[f.Filename] = l
		}
		*fi = frameInfo{done: true, hidden: n.hidden || l.hidden, allocator: n.allocator || l.allocator,
			python: l.python, plumbing: n.plumbing}
	}
	return fi
}

// text is FormatFrame of frame i, made when first asked for: most of a
// C++ stack's frames are hidden, and their text is never shown.
func (c *siteFrames) text(i uint32) string {
	fi := &c.info[i]
	if !fi.formatted {
		fi.text, fi.formatted = FormatFrame(c.stacks.Frame(i)), true
	}
	return fi.text
}

// trimmed is TrimFrames on frame indices, in c.trim (valid until the next
// call).
func (c *siteFrames) trimmed(idx []uint32) []uint32 {
	out := c.trim[:0]
	for _, i := range idx {
		fi := c.frame(i)
		if fi.hidden || (len(out) == 0 && fi.allocator) {
			continue
		}
		out = append(out, i)
	}
	if cap(out) != cap(c.trim) { // grown: keep the bigger buffer (storing it unchanged cost a write barrier)
		c.trim = out
	}
	if len(out) == 0 {
		return idx
	}
	return out
}

// site returns SiteLabel and the formatted TrimFrames of stack id.
func (c *siteFrames) site(id trace.StackID) (label string, frames []string) {
	idx := c.stacks.FrameIndices(id)
	if len(idx) == 0 {
		return "<no stack>", nil
	}
	t := c.trimmed(idx)
	// Carved from one array for all the sites (a new one when it is
	// full, the earlier lists keeping theirs), not one allocation each.
	if cap(c.strs)-len(c.strs) < len(t) {
		c.strs = make([]string, 0, max(2*cap(c.strs), 256, len(t)))
	}
	n := len(c.strs)
	for _, i := range t {
		c.strs = append(c.strs, c.text(i))
	}
	frames = c.strs[n:len(c.strs):len(c.strs)]
	for _, i := range idx {
		if fi := c.frame(i); fi.python {
			return c.text(i), frames
		}
	}
	for _, i := range t {
		if !c.info[i].plumbing {
			return c.text(i), frames
		}
	}
	return c.text(t[0]), frames
}

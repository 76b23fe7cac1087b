package trace

import "strings"

// Frame is one stack frame as PyTorch records it.
type Frame struct {
	Filename string
	Line     int64
	Name     string
}

// StackID names an interned frame list; 0 is the empty stack.
type StackID uint32

// Stacks interns frames and frame lists. Stack 0 is always the empty list.
type Stacks struct {
	frames   []Frame
	frameIdx map[Frame]uint32
	stacks   [][]uint32 // frame indices, innermost first as recorded
	stackIdx map[string]StackID
}

// NewStacks returns a table holding only the empty stack.
func NewStacks() *Stacks {
	return &Stacks{frameIdx: map[Frame]uint32{}, stacks: [][]uint32{nil}, stackIdx: map[string]StackID{"": 0}}
}

// Intern returns the ID of the frame list, adding it if new.
func (s *Stacks) Intern(frames []Frame) StackID {
	if len(frames) == 0 {
		return 0
	}
	idx := make([]uint32, len(frames))
	for i, f := range frames {
		idx[i] = s.internFrame(f)
	}
	return s.InternIndices(idx)
}

func (s *Stacks) internFrame(f Frame) uint32 {
	if i, ok := s.frameIdx[f]; ok {
		return i
	}
	i := uint32(len(s.frames))
	s.frames = append(s.frames, f)
	s.frameIdx[f] = i
	return i
}

// AddFrame interns one frame and returns its index, for codecs that store
// frames and stacks separately.
func (s *Stacks) AddFrame(f Frame) uint32 { return s.internFrame(f) }

// InternIndices interns a stack given as frame indices (from AddFrame).
// The slice is kept; the caller must not change it afterwards.
func (s *Stacks) InternIndices(idx []uint32) StackID {
	if len(idx) == 0 {
		return 0
	}
	var b strings.Builder
	b.Grow(4 * len(idx))
	for _, i := range idx {
		b.WriteByte(byte(i))
		b.WriteByte(byte(i >> 8))
		b.WriteByte(byte(i >> 16))
		b.WriteByte(byte(i >> 24))
	}
	key := b.String()
	if id, ok := s.stackIdx[key]; ok {
		return id
	}
	id := StackID(len(s.stacks))
	s.stacks = append(s.stacks, idx)
	s.stackIdx[key] = id
	return id
}

// Frames returns the frames of a stack (nil for 0 or an unknown ID).
func (s *Stacks) Frames(id StackID) []Frame {
	if s == nil || int(id) >= len(s.stacks) {
		return nil
	}
	idx := s.stacks[id]
	out := make([]Frame, len(idx))
	for i, f := range idx {
		out[i] = s.frames[f]
	}
	return out
}

// FrameIndices returns the frame indices of a stack; do not modify.
func (s *Stacks) FrameIndices(id StackID) []uint32 {
	if s == nil || int(id) >= len(s.stacks) {
		return nil
	}
	return s.stacks[id]
}

// Frame returns frame i (from AddFrame or FrameIndices).
func (s *Stacks) Frame(i uint32) Frame { return s.frames[i] }

// NumFrames and NumStacks count the table, the empty stack included in
// NumStacks.
func (s *Stacks) NumFrames() int { return len(s.frames) }
func (s *Stacks) NumStacks() int { return len(s.stacks) }

package trial

import (
	"fmt"
	"io"

	"github.com/memreplay/memreplay/trace"
)

// summary is what the tests check of a generated trace.
type summary struct {
	events, allocs, frees int
	peakLive, finalLive   uint64
	liveBlocks            int // at the end
	problems              []string
	first                 map[string]int // first event index of a site
	peakAt                int
	lastTime              int64
	timeBackwards         int
	markers               []string
}

func summarize(r trace.Reader) (*summary, error) {
	s := &summary{first: map[string]int{}}
	live := map[uint64]uint64{}
	pendingFree := uint64(0)
	var cur uint64
	var e trace.Event
	st := r.Stacks()
	for i := 0; ; i++ {
		err := r.Next(&e)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		s.events++
		if e.TimeUS < s.lastTime {
			s.timeBackwards++
		}
		s.lastTime = e.TimeUS
		if fr := st.Frames(e.Stack); len(fr) > 0 {
			if _, ok := s.first[fr[0].Name]; !ok {
				s.first[fr[0].Name] = i
			}
		}
		switch e.Action {
		case trace.ActionAlloc:
			s.allocs++
			if _, ok := live[e.Addr]; ok {
				s.problems = append(s.problems, fmt.Sprintf("event %d: alloc of live address %#x", i, e.Addr))
			}
			live[e.Addr] = e.Size
			cur += e.Size
			if cur > s.peakLive {
				s.peakLive, s.peakAt = cur, i
			}
		case trace.ActionFreeRequested:
			sz, ok := live[e.Addr]
			if !ok {
				s.problems = append(s.problems, fmt.Sprintf("event %d: free of unknown or freed address %#x", i, e.Addr))
				continue
			}
			if sz != e.Size {
				s.problems = append(s.problems, fmt.Sprintf("event %d: free size %d != alloc size %d", i, e.Size, sz))
			}
			delete(live, e.Addr)
			cur -= sz
			pendingFree = e.Addr
			s.frees++
		case trace.ActionFreeCompleted:
			if pendingFree != e.Addr {
				s.problems = append(s.problems, fmt.Sprintf("event %d: free_completed without its request", i))
			}
			pendingFree = 0
		case trace.ActionMarker:
			s.markers = append(s.markers, e.Label)
		}
		if len(s.problems) > 10 {
			break
		}
	}
	s.finalLive, s.liveBlocks = cur, len(live)
	return s, nil
}

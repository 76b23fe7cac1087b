package trace

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawStrList pickles a list of strings, each written anew with
// SHORT_BINUNICODE or BINUNICODE and never memoised, as PyTorch's C++
// pickler writes an entry's "N/A".
func rawStrList(strs []string) []byte {
	b := []byte{opPROTO, 2, opEMPTY_LIST, opMARK}
	for _, s := range strs {
		if len(s) < 256 {
			b = append(b, opSHORT_BINUNICODE, byte(len(s)))
		} else {
			b = append(b, opBINUNICODE, byte(len(s)), byte(len(s)>>8), 0, 0)
		}
		b = append(b, s...)
	}
	return append(b, opAPPENDS, opSTOP)
}

// A short string decoded again shares the strs entry of the first: one
// Go string for the thousand "N/A"s of a snapshot, not one each.
func TestRepeatedShortStringsShareAnEntry(t *testing.T) {
	strs := make([]string, 1000)
	for i := range strs {
		strs[i] = "N/A"
	}
	p, err := unpickle(rawStrList(strs), "t")
	require.NoError(t, err)
	items := p.list(p.root).items
	require.Len(t, items, 1000)
	for _, it := range items {
		require.Equal(t, items[0], it, "the same strs index")
	}
	require.Len(t, p.strs, 1)
	require.Equal(t, "N/A", p.str(items[0]))
}

// Whatever the cache holds, every string decodes to its own value: many
// distinct strings of every length around the cache's limit (so slots
// collide and are replaced), each repeated, some back to back.
func TestStringCacheKeepsValues(t *testing.T) {
	var strs []string
	for i := 0; i < 3000; i++ {
		n := i % (maxCachedStr + 4)
		s := fmt.Sprintf("%x", i*7919)
		s = strings.Repeat(s, n/len(s)+1)[:n]
		strs = append(strs, s, s)
		if i%3 == 0 {
			strs = append(strs, strs[i/2])
		}
	}
	strs = append(strs, strings.Repeat("y", 300), strings.Repeat("y", 300))
	p, err := unpickle(rawStrList(strs), "t")
	require.NoError(t, err)
	got, err := p.toGo(p.root, 4, len(strs)+1)
	require.NoError(t, err)
	want := make([]any, len(strs))
	for i, s := range strs {
		want[i] = s
	}
	require.Equal(t, want, got)
}

// The memo is sized from the input, never beyond a bound: a huge declared
// size (a hostile file's) does not allocate more than 8 MB ahead.
func TestMemoSizedFromInput(t *testing.T) {
	require.Nil(t, memoFor(10))
	require.Equal(t, 1000, cap(memoFor(32000)))
	require.Equal(t, 1<<20, cap(memoFor(1<<40)))
}

// An EventLog starts with a small chunk, doubles it up to elChunk, and
// reads back every event across the chunk boundaries.
func TestEventLogChunksGrow(t *testing.T) {
	var l EventLog
	for i := 0; i < 100; i++ {
		e := sinkEvent(i)
		l.Append(&e)
	}
	require.Len(t, l.chunks, 1)
	require.Equal(t, elFirstChunk, cap(l.chunks[0]), "a short log is given a small chunk")
	for i := 100; i < 200000; i++ {
		e := sinkEvent(i)
		l.Append(&e)
	}
	for k := 1; k < len(l.chunks); k++ {
		require.Equal(t, min(2*cap(l.chunks[k-1]), elChunk), cap(l.chunks[k]), "chunk %d", k)
	}
	require.Equal(t, elChunk, cap(l.chunks[len(l.chunks)-1]))
	cur := l.Cursor()
	var e Event
	for i := 0; i < 200000; i++ {
		require.NoError(t, cur.Next(&e))
		require.Equal(t, sinkEvent(i), e, "event %d", i)
	}
	require.Error(t, cur.Next(&e))
}

type seenEvents struct{ events []Event }

func (s *seenEvents) Event(i int64, e *Event) {
	if int(i) != len(s.events) {
		panic(fmt.Sprintf("event %d after %d", i, len(s.events)))
	}
	s.events = append(s.events, *e)
}
func (s *seenEvents) Restart() { s.events = nil }

// pipeLog's batches start small and grow to pipeBatch; the observer and
// the log see every event once, in order, whatever the batch sizes.
func TestPipeLogBatchesGrow(t *testing.T) {
	for _, n := range []int{0, 1, pipeFirstBatch, pipeFirstBatch + 1, 3*pipeBatch + 17} {
		obs := &seenEvents{}
		p := newPipeLog(obs)
		require.Equal(t, pipeFirstBatch, cap(p.batch))
		biggest := 0
		for i := 0; i < n; i++ {
			*p.next() = sinkEvent(i)
			biggest = max(biggest, cap(p.batch))
			p.commit()
		}
		p.end(true)
		if n > 2*pipeBatch {
			require.Equal(t, pipeBatch, biggest, "batches grow to pipeBatch")
		}
		require.Len(t, obs.events, n)
		cur := p.l.Cursor()
		var e Event
		for i := 0; i < n; i++ {
			require.Equal(t, sinkEvent(i), obs.events[i], "observed event %d", i)
			require.NoError(t, cur.Next(&e))
			require.Equal(t, sinkEvent(i), e, "logged event %d", i)
		}
	}
}

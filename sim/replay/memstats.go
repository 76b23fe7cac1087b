package replay

// Checking a replay against PyTorch's own statistics.
//
// A recording process can save torch.cuda.memory_stats() beside its
// snapshot (bench/gpu_record_trials.py writes NAME.stats.json next to
// NAME.pickle). Those numbers are what PyTorch's allocator counted while the
// trace was written, so a replay that makes PyTorch's decisions must end
// with the same statistics: Options.ExpectStats compares them key by key
// and fills Result.StatsCheck.
//
// A trace does not determine every statistic, and the check says which it
// holds to which standard rather than comparing everything alike:
//
//   - exact: the trace determines the value; a difference fails the check.
//     For a trace recorded from the start (no reconstruction) that is every
//     key memreplay keeps except those below.
//   - inferred: the value depends on something PyTorch's trace leaves
//     implicit, which the replay infers. A difference is reported, and does
//     not fail the check. In a PyTorch snapshot, an empty_cache() call
//     right before an allocation that needs a new segment reads exactly
//     like that allocation's retry (segment_free entries, then
//     segment_alloc), so num_alloc_retries and num_sync_all_streams are
//     inferred; and when another stream's work completes shows only through
//     free_completed entries, so the transient counts of inactive splits
//     (inactive_split and inactive_split_bytes: peak, allocated, freed) are
//     inferred too. Measured on recorded workloads stripped to what PyTorch
//     records (TestMemoryStatsOfPyTorchLikeTraces): whenever every decision
//     matched, the exact keys all matched, and only these differed, and
//     only sometimes. memreplay's own traces record those calls and events,
//     so there every key is exact.
//   - not compared: a partial trace (recorded after the model was loaded,
//     or whose ring buffer overflowed) starts after the process had
//     allocated, so its counts since the process started (allocated,
//     freed, num_*) are unknown; its current values and max_split_size are
//     exact, its peaks inferred (the peak may predate the trace). Keys
//     memreplay does not keep (a newer PyTorch's) are listed as not
//     compared too.
//
// The statistics are per device; a trace of several devices needs the
// device named (MemoryStats.Device).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/memreplay/memreplay/trace"
)

// MemoryStats is torch.cuda.memory_stats() of one device as the recording
// process saved it.
type MemoryStats struct {
	// File names the statistics in messages.
	File string
	// Device is the traced device they belong to; -1 means the trace's
	// only device.
	Device int32
	// Values are the flattened statistics ("reserved_bytes.all.peak").
	Values map[string]int64
}

// maxStatsBytes bounds a statistics file: memory_stats() has about 150
// keys, a few KiB as JSON.
const maxStatsBytes = 4 << 20

// ReadMemoryStats reads statistics saved as JSON: the flat dict of
// json.dump(torch.cuda.memory_stats()) or the nested one of
// memory_stats_as_nested_dict(), flattened with dots as PyTorch does. Every
// value must be an integer (a float with an integral value is taken: some
// JSON writers print 1e9). Bad input is a *trace.FormatError naming file
// and the byte offset.
func ReadMemoryStats(r io.Reader, file string) (*MemoryStats, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxStatsBytes+1))
	if err != nil {
		return nil, &trace.FormatError{File: file, Offset: -1, Event: -1, Msg: "reading memory_stats", Err: err}
	}
	if len(data) > maxStatsBytes {
		return nil, &trace.FormatError{File: file, Offset: maxStatsBytes, Event: -1,
			Msg: fmt.Sprintf("memory_stats file larger than %d bytes", maxStatsBytes)}
	}
	bad := func(off int64, msg string) error {
		return &trace.FormatError{File: file, Offset: off, Event: -1, Msg: msg}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			// Offset counts the bytes read, the bad one included.
			return nil, bad(max(se.Offset-1, 0), "memory_stats: "+se.Error())
		case errors.As(err, &te):
			return nil, bad(te.Offset, "memory_stats: want a JSON object of statistics (json.dump(torch.cuda.memory_stats()))")
		case errors.Is(err, io.EOF):
			return nil, bad(0, "memory_stats: empty file")
		}
		return nil, bad(dec.InputOffset(), "memory_stats: "+err.Error())
	}
	if root == nil {
		return nil, bad(0, "memory_stats: want a JSON object of statistics, got null")
	}
	end := dec.InputOffset()
	if rest := bytes.TrimLeft(data[end:], " \t\r\n"); len(rest) > 0 {
		return nil, bad(int64(len(data)-len(rest)), "memory_stats: data after the JSON object")
	}
	ms := &MemoryStats{File: file, Device: -1, Values: map[string]int64{}}
	if err := flattenStats(ms.Values, "", root); err != nil {
		return nil, &trace.FormatError{File: file, Offset: -1, Event: -1, Msg: "memory_stats: " + err.Error()}
	}
	if len(ms.Values) == 0 {
		return nil, bad(0, "memory_stats: no statistics in the object")
	}
	return ms, nil
}

// flattenStats adds m's values under prefix, nested objects joined with
// dots.
func flattenStats(out map[string]int64, prefix string, m map[string]any) error {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		switch v := v.(type) {
		case map[string]any:
			if err := flattenStats(out, key, v); err != nil {
				return err
			}
		case json.Number:
			n, err := statInt(v)
			if err != nil {
				return fmt.Errorf("%q: %v", key, err)
			}
			out[key] = n
		default:
			return fmt.Errorf("%q: want an integer, got %s", key, jsonKind(v))
		}
	}
	return nil
}

func statInt(v json.Number) (int64, error) {
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
		return 0, fmt.Errorf("want an integer, got %s", v)
	}
	return int64(f), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// StatsCheck compares a replay's end-of-trace statistics of one device
// with the recording process's memory_stats() (see the comment at the top
// of this file for the three standards).
type StatsCheck struct {
	File   string
	Device int32
	// Exact counts the keys the trace determines and ExactMatched those
	// equal; Inferred and InferredMatched likewise for keys the replay
	// infers.
	Exact, ExactMatched       int
	Inferred, InferredMatched int
	// Differences lists every compared key that differs, by key.
	Differences []StatDifference
	// NotCompared lists the keys left out, by key.
	NotCompared []StatSkip
	// Stopped is set when the replay stopped early (an OOM under --oom
	// stop): its statistics are not the end of the trace.
	Stopped bool
}

// StatDifference is one statistic the replay ended with differently.
type StatDifference struct {
	Key      string
	Recorded int64 // memory_stats()
	Replayed int64
	Exact    bool   // false: an inferred key (does not fail the check)
	Why      string // for an inferred key, what the trace leaves implicit
}

// StatSkip is a key not compared and why.
type StatSkip struct {
	Key string
	Why string
}

// Passed reports whether every key the trace determines matched (and
// there was at least one).
func (c *StatsCheck) Passed() bool {
	return c.Exact > 0 && c.ExactMatched == c.Exact && !c.Stopped
}

// The reasons, shared by the check's output and docs/replay.md.
const (
	whyRetry = "an empty_cache() right before an allocation that needs a new segment reads in PyTorch's trace " +
		"exactly like that allocation's retry"
	whySync  = "counts empty_cache() calls and retries, which PyTorch's trace leaves implicit"
	whySplit = "counts transient inactive splits, which depend on when other streams' work completed " +
		"(PyTorch's trace shows it only through free_completed entries)"
	whyPeakPartial  = "the trace starts after the process had allocated: the peak may predate it"
	whyCountPartial = "counted since the process started, and the trace starts later"
	whyNotModelled  = "not kept by memreplay"
)

// classify says how the trace determines key: exact, or inferred with why,
// or not compared (skip) with why.
func classify(key string, implicit, partial bool) (exact, skip bool, why string) {
	if partial {
		switch {
		case key == "max_split_size" || strings.HasSuffix(key, ".current"):
			return true, false, ""
		case strings.HasSuffix(key, ".peak"):
			return false, false, whyPeakPartial
		}
		return false, true, whyCountPartial
	}
	if !implicit {
		return true, false, ""
	}
	switch {
	case key == "num_alloc_retries":
		return false, false, whyRetry
	case key == "num_sync_all_streams":
		return false, false, whySync
	case strings.HasPrefix(key, "inactive_split.") || strings.HasPrefix(key, "inactive_split_bytes."):
		if !strings.HasSuffix(key, ".current") {
			return false, false, whySplit
		}
	}
	return true, false, ""
}

// checkStats compares the device's statistics with want. implicit says
// the trace leaves empty_cache, stream synchronisation and record_stream
// implicit (a PyTorch snapshot); partial that it starts after the process
// had allocated.
func checkStats(want *MemoryStats, dev int32, got map[string]int64, implicit, partial, stopped bool) *StatsCheck {
	c := &StatsCheck{File: want.File, Device: dev, Stopped: stopped}
	keys := make([]string, 0, len(want.Values))
	for k := range want.Values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got[k]
		if !ok {
			c.NotCompared = append(c.NotCompared, StatSkip{Key: k, Why: whyNotModelled})
			continue
		}
		exact, skip, why := classify(k, implicit, partial)
		if skip {
			c.NotCompared = append(c.NotCompared, StatSkip{Key: k, Why: why})
			continue
		}
		w := want.Values[k]
		if exact {
			c.Exact++
		} else {
			c.Inferred++
		}
		if w == g {
			if exact {
				c.ExactMatched++
			} else {
				c.InferredMatched++
			}
			continue
		}
		c.Differences = append(c.Differences, StatDifference{Key: k, Recorded: w, Replayed: g, Exact: exact, Why: why})
	}
	return c
}

// statsDevice picks the device whose statistics ms holds.
func (rp *replayer) statsDevice(ms *MemoryStats) (int32, error) {
	bad := func(msg string) error {
		return &trace.FormatError{File: ms.File, Offset: -1, Event: -1, Msg: msg}
	}
	if ms.Device >= 0 {
		if rp.devs[ms.Device] == nil {
			return 0, bad(fmt.Sprintf("memory_stats of device %d, which the trace %s does not use (it uses %s)",
				ms.Device, rp.opts.Name, deviceList(rp.order)))
		}
		return ms.Device, nil
	}
	if len(rp.order) != 1 {
		return 0, bad(fmt.Sprintf("memory_stats() is one device's and the trace %s uses %s: name the device",
			rp.opts.Name, deviceList(rp.order)))
	}
	return rp.order[0], nil
}

func deviceList(order []int32) string {
	if len(order) == 0 {
		return "no device"
	}
	s := make([]string, len(order))
	for i, d := range order {
		s[i] = strconv.Itoa(int(d))
	}
	return "devices " + strings.Join(s, ", ")
}

package study

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/memreplay/memreplay/sim/trial"
)

// The state file is JSON Lines, one object per line, each with a "kind":
//
//	{"kind":"header","version":1,"options":{...}}     first line, once
//	{"kind":"trial","id":7,"spec":{...},...}          one per finished trial
//	{"kind":"resume","at_us":123,"dropped_torn":false} each resume
//	{"kind":"run_end","restarts":2,...}               each run that ended by itself
//
// A line is written with one write and fsynced before the study goes on, so
// a kill leaves every finished trial on disk and at most one torn line at
// the end. Reading drops that torn last line with a warning; anything else
// malformed is an error naming file:line, since silently skipping a line in
// the middle would lose a finished trial and then rerun it under a
// different history.

// stateVersion is the format's version in the header.
const stateVersion = 1

// Header is the state file's first line: what the study is.
type Header struct {
	Kind    string      `json:"kind"`
	Version int         `json:"version"`
	Options OptionsJSON `json:"options"`
}

// SpecJSON is a trial.Spec as the state file spells it.
type SpecJSON struct {
	Model                 modelJSON       `json:"model"` // a preset's name or a custom shape, as in a space
	Batch                 int             `json:"batch"`
	SeqLen                int             `json:"seq_len"`
	GradAccum             int             `json:"grad_accum"`
	Precision             trial.Precision `json:"precision"`
	Optimizer             string          `json:"optimizer"`
	GradientCheckpointing bool            `json:"gradient_checkpointing"`
	Steps                 int             `json:"steps"`
	EvalEvery             int             `json:"eval_every"`
	EvalBatches           int             `json:"eval_batches"`
	Seed                  uint64          `json:"seed"`
	Attention             string          `json:"attention,omitempty"`
	DynamicPadding        bool            `json:"dynamic_padding,omitempty"`
	KeepGrads             bool            `json:"keep_grads,omitempty"`
	Compile               bool            `json:"compile,omitempty"`
}

func specJSON(s trial.Spec) SpecJSON {
	return SpecJSON{Model: toModelJSON(s.Model), Batch: s.Batch, SeqLen: s.SeqLen, GradAccum: s.GradAccum, Precision: s.Precision,
		Optimizer: s.Optimizer, GradientCheckpointing: s.GradientCheckpointing, Steps: s.Steps,
		EvalEvery: s.EvalEvery, EvalBatches: s.EvalBatches, Seed: s.Seed,
		Attention: s.Attention, DynamicPadding: s.DynamicPadding, KeepGrads: s.KeepGrads, Compile: s.Compile}
}

// Spec converts back; an error for a preset this memreplay does not know.
func (j SpecJSON) Spec() (trial.Spec, error) {
	m, err := j.Model.model()
	if err != nil {
		return trial.Spec{}, err
	}
	return trial.Spec{Model: m, Batch: j.Batch, SeqLen: j.SeqLen, GradAccum: j.GradAccum, Precision: j.Precision,
		Optimizer: j.Optimizer, GradientCheckpointing: j.GradientCheckpointing, Steps: j.Steps,
		EvalEvery: j.EvalEvery, EvalBatches: j.EvalBatches, Seed: j.Seed,
		Attention: j.Attention, DynamicPadding: j.DynamicPadding, KeepGrads: j.KeepGrads, Compile: j.Compile}, nil
}

// Record is one finished trial: a state-file line of kind "trial".
type Record struct {
	Kind    string   `json:"kind"`
	ID      int      `json:"id"`
	Label   string   `json:"label"`
	Spec    SpecJSON `json:"spec"`
	Worker  int      `json:"worker"` // -1 for a trial pruned by the estimate (no worker ran it)
	Outcome Outcome  `json:"outcome"`
	Error   string   `json:"error,omitempty"`
	// StartUS and EndUS are the study's simulated clock in microseconds;
	// a resumed run's clock continues from where the last run's ended.
	StartUS             int64  `json:"start_us"`
	EndUS               int64  `json:"end_us"`
	Events              int64  `json:"events"`
	PeakAllocated       uint64 `json:"peak_allocated"`
	PeakReserved        uint64 `json:"peak_reserved"`
	ReservedUnallocated uint64 `json:"reserved_unallocated"`
	Retries             int64  `json:"retries"`
	OOMs                int64  `json:"ooms"`
	DeviceTimeUS        int64  `json:"device_time_us"`
	Process             int    `json:"process,omitempty"`
	// EstimateBytes is the pre-trial estimate with its margin, when the
	// estimate policy is on.
	EstimateBytes uint64 `json:"estimate_bytes,omitempty"`
	// Run numbers the invocations of the study: 0 for the first, 1 after
	// the first resume, ...
	Run int `json:"run"`
}

// ResumeLine marks a resume: the earlier run was killed or stopped here.
type ResumeLine struct {
	Kind        string `json:"kind"`
	Run         int    `json:"run"`
	AtUS        int64  `json:"at_us"`
	DroppedTorn bool   `json:"dropped_torn,omitempty"`
	// Trials is the study's size from this run on (a resume may extend it).
	Trials int `json:"trials,omitempty"`
}

// RunEnd is written when a run ends by itself (not killed): what the
// workers engine says about the run as a whole.
type RunEnd struct {
	Kind           string `json:"kind"`
	Run            int    `json:"run"`
	MakespanUS     int64  `json:"makespan_us"` // on the study's clock
	Restarts       int    `json:"restarts"`
	GivenUp        []int  `json:"given_up,omitempty"`
	Stopped        bool   `json:"stopped,omitempty"`
	PeakDeviceUsed uint64 `json:"peak_device_used"`
	Capacity       uint64 `json:"capacity"`
}

// State is what a state file holds.
type State struct {
	Header  Header
	Records []Record
	Resumes []ResumeLine
	Ends    []RunEnd
	// Torn is set when the last line was torn (a kill mid-write) and
	// dropped; TornAt is its byte offset, where the file is cut on resume.
	Torn   bool
	TornAt int64
	// End is the byte offset after the last good line.
	End int64
}

// Runs is how many runs the file records (1 + resumes).
func (s *State) Runs() int { return 1 + len(s.Resumes) }

// ClockUS is where the study's clock stands: the latest end of a trial or
// of a run.
func (s *State) ClockUS() int64 {
	var c int64
	for _, r := range s.Records {
		c = max(c, r.EndUS)
	}
	for _, e := range s.Ends {
		c = max(c, e.MakespanUS)
	}
	for _, r := range s.Resumes {
		c = max(c, r.AtUS)
	}
	return c
}

// MaxStateLine bounds one line of a state file. A trial's line is under
// a KiB; the header embeds the search space, itself at most MaxSpaceBytes,
// so four times that leaves room for any real study while a stream with
// no newline (/dev/zero, a binary file) fails after reading 4 MiB instead
// of filling memory.
const MaxStateLine = 4 * MaxSpaceBytes

// ReadState reads a state file (name is used in errors).
func ReadState(r io.Reader, name string) (*State, error) {
	return readState(r, name, MaxStateLine)
}

// readState is ReadState with the line bound as a parameter, for the fuzz
// test to reach it with small inputs.
func readState(r io.Reader, name string, maxLine int) (*State, error) {
	st := &State{}
	br := bufio.NewReaderSize(r, 64<<10)
	seen := map[int]bool{}
	var off int64
	for line := 1; ; line++ {
		b, err := readLine(br, maxLine)
		if errors.Is(err, errLongLine) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes: not a study state file", name, line, maxLine)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		if len(b) == 0 {
			break
		}
		complete := b[len(b)-1] == '\n'
		perr := st.parseLine(bytes.TrimSpace(b), line, seen)
		if perr != nil {
			if !complete && line == 1 && !headerStart(b) {
				// Not a header cut short: some other file.
				return nil, fmt.Errorf("%s:%d: %v", name, line, perr)
			}
			if !complete {
				// The last line, cut by a kill: drop it.
				st.Torn, st.TornAt = true, off
				break
			}
			return nil, fmt.Errorf("%s:%d: %v", name, line, perr)
		}
		off += int64(len(b))
		st.End = off
		if !complete {
			break
		}
	}
	if st.Header.Kind == "" {
		// Empty, or a header cut short: the study stopped (killed, or the
		// disk full) while creating the file, before any trial.
		return nil, fmt.Errorf("%s: %w", name, ErrNoHeader)
	}
	return st, nil
}

// ErrNoHeader is a state file that is empty or holds only the start of
// its header line: the study stopped while creating it, before its first
// trial. --resume starts such a study afresh; there is nothing to report.
var ErrNoHeader = errors.New("no complete header line: the study stopped as it created the file (killed, or the disk full), before any trial")

// headerStart reports whether b could be the start of a header line as
// createState writes it: only such a torn first line is taken for a study
// cut short at creation, never an unrelated file.
func headerStart(b []byte) bool {
	const start = `{"kind":"header",`
	if len(b) <= len(start) {
		return strings.HasPrefix(start, string(b))
	}
	return bytes.HasPrefix(b, []byte(start))
}

var errLongLine = errors.New("line too long")

// readLine is bufio.Reader.ReadBytes('\n') that gives up with errLongLine
// once the line, newline included, would pass max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max {
			return nil, errLongLine
		}
		line = append(line, frag...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

func (st *State) parseLine(b []byte, line int, seen map[int]bool) error {
	if len(b) == 0 {
		return errors.New("empty line")
	}
	var k struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if line == 1 && k.Kind != "header" {
		return fmt.Errorf("first line is %q, want the header", k.Kind)
	}
	strict := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	switch k.Kind {
	case "header":
		if line != 1 {
			return errors.New("a second header")
		}
		if err := strict(&st.Header); err != nil {
			return fmt.Errorf("header: %v", err)
		}
		if st.Header.Version != stateVersion {
			return fmt.Errorf("header: version %d, this memreplay reads %d", st.Header.Version, stateVersion)
		}
	case "trial":
		var r Record
		if err := strict(&r); err != nil {
			return fmt.Errorf("trial: %v", err)
		}
		if r.ID < 0 {
			return fmt.Errorf("trial id %d", r.ID)
		}
		if seen[r.ID] {
			return fmt.Errorf("trial %d recorded twice", r.ID)
		}
		switch r.Outcome {
		case Completed, PrunedOOM, PrunedEstimate, Failed:
		default:
			return fmt.Errorf("trial %d: outcome %q", r.ID, r.Outcome)
		}
		seen[r.ID] = true
		st.Records = append(st.Records, r)
	case "resume":
		var r ResumeLine
		if err := strict(&r); err != nil {
			return fmt.Errorf("resume: %v", err)
		}
		st.Resumes = append(st.Resumes, r)
	case "run_end":
		var e RunEnd
		if err := strict(&e); err != nil {
			return fmt.Errorf("run_end: %v", err)
		}
		st.Ends = append(st.Ends, e)
	default:
		return fmt.Errorf("unknown line kind %q", k.Kind)
	}
	return nil
}

// LoadState reads the state file at path.
func LoadState(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadState(f, path)
}

// stateWriter appends lines to the state file, one write and one fsync
// each.
type stateWriter struct {
	f    *os.File
	path string
}

// jsonLine is v as one JSON line, newline included.
func jsonLine(v any) ([]byte, error) {
	var b bytes.Buffer
	err := json.NewEncoder(&b).Encode(v) // Encode ends the line
	return b.Bytes(), err
}

func (w *stateWriter) write(v any) error {
	line, err := jsonLine(v)
	if err != nil {
		return fmt.Errorf("%s: %v", w.path, err)
	}
	if _, err := w.f.Write(line); err != nil {
		return fmt.Errorf("%s: %v", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("%s: %v", w.path, err)
	}
	return nil
}

func (w *stateWriter) close() error {
	if w == nil || w.f == nil {
		return nil
	}
	return w.f.Close()
}

// createState starts a new state file; it refuses to overwrite one.
func createState(path string, h Header) (*stateWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s exists: resume it (--resume) or choose another state file", path)
		}
		return nil, err
	}
	w := &stateWriter{f: f, path: path}
	if err := w.write(h); err != nil {
		// A file without its header cannot be resumed: leave none.
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

// restartState rewrites a state file that holds no complete header
// (ErrNoHeader) as a new study's.
func restartState(path string, h Header) (*stateWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return nil, err
	}
	w := &stateWriter{f: f, path: path}
	if err := w.write(h); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// appendState opens an existing state file for appending after its last
// good line, cutting off a torn one.
func appendState(path string, st *State) (*stateWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	end := st.End
	if err := f.Truncate(end); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: cutting the torn last line: %v", path, err)
	}
	// A last line complete but for its newline was kept; end it.
	if end > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], end-1); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if last[0] != '\n' {
			if _, err := f.WriteAt([]byte{'\n'}, end); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			end++
		}
	}
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &stateWriter{f: f, path: path}, nil
}

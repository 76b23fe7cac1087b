package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// OptionsJSON is what a state file's header says about the study: every
// option that changes a trial's result. A resume compares it field by
// field with the run's; Trials alone may differ (to extend a study).
type OptionsJSON struct {
	Space           Space   `json:"space"`
	Sampler         string  `json:"sampler"`
	Trials          int     `json:"trials"`
	Workers         int     `json:"par"`
	Seed            uint64  `json:"seed"`
	Capacity        uint64  `json:"capacity"`
	ContextOverhead uint64  `json:"context_overhead"`
	AllocConf       string  `json:"alloc_conf"`
	AllocPolicy     string  `json:"alloc_policy,omitempty"` // "" is PyTorch's
	PruneOnOOM      bool    `json:"prune_on_oom"`
	EmptyCache      bool    `json:"empty_cache"`
	DoubleClear     bool    `json:"double_clear"`
	ResetEvery      int     `json:"reset_every"`
	EstimatePrune   bool    `json:"estimate_prune"`
	EstimateMargin  float64 `json:"estimate_margin"`
	EstimateBy      string  `json:"estimate_by,omitempty"` // absent in headers before it existed: the hand count
	RestartOnError  bool    `json:"restart_on_error"`
	MaxFailures     int     `json:"max_failures"`
	OOMCorrupts     float64 `json:"oom_corrupts"`
	FaultRate       float64 `json:"fault_rate"`
	StaggerUS       int64   `json:"stagger_us"`
	ComputeShare    float64 `json:"compute_share"`
	GapUS           int64   `json:"gap_us"`
	StartupUS       int64   `json:"startup_us"`
	// The packed schedule; empty for the fixed one, so that the headers
	// of fixed studies are what they were.
	Schedule   string  `json:"schedule,omitempty"`
	Predict    string  `json:"predict,omitempty"`
	PackMargin float64 `json:"pack_margin,omitempty"`
	// ResetKind is empty for a process restart, as headers had it.
	ResetKind string `json:"reset_kind,omitempty"`
}

// JSON is the header form of o.
func (o Options) JSON() OptionsJSON {
	p := o.Policy
	sampler := o.Sampler
	if sampler == "" {
		sampler = RandomSampler
	}
	j := OptionsJSON{Space: o.Space, Sampler: sampler, Trials: o.Trials, Workers: o.Workers, Seed: o.Seed,
		Capacity: o.Capacity, ContextOverhead: o.ContextOverhead, AllocConf: o.AllocConf, AllocPolicy: o.AllocPolicy,
		PruneOnOOM: p.PruneOnOOM, EmptyCache: p.EmptyCache, DoubleClear: p.DoubleClear, ResetEvery: p.ResetEvery,
		EstimatePrune: p.EstimatePrune, EstimateMargin: p.EstimateMargin, EstimateBy: estimateBy(p.EstimateBy), RestartOnError: p.RestartOnError,
		MaxFailures: p.MaxFailures, OOMCorrupts: p.OOMCorrupts, FaultRate: p.FaultRate,
		StaggerUS: o.Stagger.Microseconds(), ComputeShare: o.ComputeShare,
		GapUS: o.Gap.Microseconds(), StartupUS: o.StartupCost.Microseconds()}
	if p.ResetKind == ResetClear {
		j.ResetKind = ResetClear
	}
	if o.Schedule == PackedSchedule {
		j.Schedule, j.Predict, j.PackMargin = PackedSchedule, o.Packing.Predict, o.Packing.Margin
		if j.Predict == "" {
			j.Predict = ReplayPredictor
		}
	}
	return j
}

// estimateBy spells the default as headers always have: absent.
func estimateBy(s string) string {
	if s == EstimateByHand {
		return ""
	}
	return s
}

// diffOptions names every field (other than trials) where the file's
// header and the run's options differ.
func diffOptions(file, run OptionsJSON) ([]string, error) {
	// State files written before the default space had its present name
	// call it "seeds" (and "seeds-unconstrained"); the lists are the same,
	// so such a study still resumes.
	if rest, ok := strings.CutPrefix(file.Space.Name, "seeds"); ok && strings.HasPrefix(run.Space.Name, "bert-family") {
		file.Space.Name = "bert-family" + rest
	}
	toMap := func(o OptionsJSON) (map[string]json.RawMessage, error) {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		m := map[string]json.RawMessage{}
		return m, json.Unmarshal(b, &m)
	}
	fm, err := toMap(file)
	if err != nil {
		return nil, err
	}
	rm, err := toMap(run)
	if err != nil {
		return nil, err
	}
	// Keys of both: a field one header leaves out (omitempty) differs from
	// the other's value too.
	var keys []string
	for k := range rm {
		keys = append(keys, k)
	}
	for k := range fm {
		if _, ok := rm[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var diffs []string
	for _, k := range keys {
		if k == "trials" || bytes.Equal(fm[k], rm[k]) {
			continue
		}
		f, r := string(fm[k]), string(rm[k])
		if f == "" {
			f = "none"
		}
		if r == "" {
			r = "none"
		}
		if k == "space" {
			f, r = file.Space.Name, run.Space.Name
			if f == r {
				f, r = "(another space)", "(this one)"
			}
		}
		diffs = append(diffs, fmt.Sprintf("%s: file has %s, this run %s", k, f, r))
	}
	return diffs, nil
}

// openState creates the state file, or reads it for a resume and opens it
// for appending.
func (s *study) openState() error {
	o := s.o
	h := Header{Kind: "header", Version: stateVersion, Options: o.JSON()}
	s.st = &State{Header: h}
	if o.State == "" {
		if o.Resume {
			return errors.New("resume: no state file given")
		}
		return nil
	}
	if o.Resume {
		st, err := LoadState(o.State)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Nothing to resume: start the study (a script can always
			// pass --resume, as the BERT-family study's make target resumed).
		case errors.Is(err, ErrNoHeader):
			// Stopped as it was created: no trial to keep, so it starts
			// afresh, as a missing file does.
			if o.Warn != nil {
				fmt.Fprintf(o.Warn, "warning: %s: no complete header line (the study stopped as it created the file); starting the study afresh\n", o.State)
			}
			w, err := restartState(o.State, h)
			if err != nil {
				return err
			}
			s.w = w
			return nil
		case err != nil:
			return err
		default:
			return s.resume(st)
		}
	}
	w, err := createState(o.State, h)
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

func (s *study) resume(st *State) error {
	o := s.o
	diffs, err := diffOptions(st.Header.Options, o.JSON())
	if err != nil {
		return err
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s: cannot resume, the study's options differ: %s", o.State, strings.Join(diffs, "; "))
	}
	for _, r := range st.Records {
		if r.ID >= s.planned {
			return fmt.Errorf("%s: trial %d is recorded but the study now has %d trials", o.State, r.ID, s.planned)
		}
		s.done[r.ID] = true
	}
	if st.Torn && o.Warn != nil {
		fmt.Fprintf(o.Warn, "warning: %s: dropped a torn last line at byte %d (the run was killed while writing it; that trial runs again)\n", o.State, st.TornAt)
	}
	w, err := appendState(o.State, st)
	if err != nil {
		return err
	}
	s.w, s.st = w, st
	// The header keeps the first run's trial count; the file records
	// what each run asked for in its resume line.
	s.runIdx = st.Runs()
	s.offsetUS = st.ClockUS()
	line := ResumeLine{Kind: "resume", Run: s.runIdx, AtUS: s.offsetUS, DroppedTorn: st.Torn, Trials: s.planned}
	if err := w.write(line); err != nil {
		w.close()
		return err
	}
	st.Resumes = append(st.Resumes, line)
	st.Torn = false
	return nil
}

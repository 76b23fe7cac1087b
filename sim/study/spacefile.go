package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/memreplay/memreplay/sim/trial"
)

// The JSON form of a Space (LoadSpace reads it, MarshalJSON writes it, the
// state file's header embeds it):
//
//	{
//	  "name": "small",
//	  "models": ["bert-base", {"name": "tiny", "layers": 2, "hidden": 128,
//	             "heads": 2, "intermediate": 512, "vocab": 30522, "max_positions": 512}],
//	  "choices": {"batch_sizes": [8, 16], "seq_lens": [128, 256],
//	              "grad_accum": [1], "precisions": ["fp32", "fp16"],
//	              "optimizers": ["adamw"], "checkpointing": [false],
//	              "attention": ["sdpa"], "dynamic_padding": [true]},
//	  "overrides": [{"name": "heavy", "match": ["large"],
//	                 "choices": {"batch_sizes": [8]}}],
//	  "max_effective_batch": 0,
//	  "steps": 0, "eval_every": 0, "eval_batches": 0
//	}
//
// A model is a preset's name (sim/trial's Models) or a custom shape. In
// "choices", batch_sizes and seq_lens are required; grad_accum defaults to
// [1], precisions to ["fp32"], optimizers to ["adamw"], checkpointing to
// [false], attention to ["eager"] ("sdpa": SDPA where the model has it;
// "manual": attention written by hand), dynamic_padding, keep_grads and
// compile to [false] (docs/trial-model.md says what each changes). A custom model may also give "arch"
// (encoder, deberta, decoder-lm), "type_vocab", "position_buckets" and
// "labels" (sim/trial's Model). Unknown fields are errors: a misspelt constraint silently ignored
// is how a study ends up running configurations it meant to exclude.

type spaceJSON struct {
	Name              string         `json:"name,omitempty"`
	Models            []modelJSON    `json:"models"`
	Choices           choicesJSON    `json:"choices"`
	Overrides         []overrideJSON `json:"overrides,omitempty"`
	MaxEffectiveBatch int            `json:"max_effective_batch,omitempty"`
	Steps             int            `json:"steps,omitempty"`
	EvalEvery         int            `json:"eval_every,omitempty"`
	EvalBatches       int            `json:"eval_batches,omitempty"`
}

type choicesJSON struct {
	BatchSizes    []int             `json:"batch_sizes,omitempty"`
	SeqLens       []int             `json:"seq_lens,omitempty"`
	GradAccum     []int             `json:"grad_accum,omitempty"`
	Precisions    []trial.Precision `json:"precisions,omitempty"`
	Optimizers    []string          `json:"optimizers,omitempty"`
	Checkpointing []bool            `json:"checkpointing,omitempty"`
	Attention     []string          `json:"attention,omitempty"`
	DynamicPad    []bool            `json:"dynamic_padding,omitempty"`
	KeepGrads     []bool            `json:"keep_grads,omitempty"`
	Compile       []bool            `json:"compile,omitempty"`
}

type overrideJSON struct {
	Name    string      `json:"name,omitempty"`
	Match   []string    `json:"match"`
	Choices choicesJSON `json:"choices"`
}

// modelJSON is a preset name or a custom shape.
type modelJSON struct {
	preset string
	custom *customModelJSON
}

type customModelJSON struct {
	Name            string     `json:"name"`
	Arch            trial.Arch `json:"arch,omitempty"` // encoder (default), deberta, decoder-lm
	Layers          int        `json:"layers"`
	Hidden          int        `json:"hidden"`
	Heads           int        `json:"heads"`
	Intermediate    int        `json:"intermediate"`
	Vocab           int        `json:"vocab"`
	MaxPositions    int        `json:"max_positions"`
	TypeVocab       int        `json:"type_vocab,omitempty"`
	PositionBuckets int        `json:"position_buckets,omitempty"`
	Labels          int        `json:"labels,omitempty"`
}

func (m *modelJSON) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.preset)
	}
	if len(b) == 0 || b[0] != '{' {
		return errors.New("a model is a preset's name or an object with name, layers, hidden, heads, intermediate, vocab, max_positions")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	m.custom = new(customModelJSON)
	return d.Decode(m.custom)
}

// toModelJSON names a preset by its name and spells out anything else.
func toModelJSON(m trial.Model) modelJSON {
	if p, err := trial.LookupModel(m.Name); err == nil && reflect.DeepEqual(p, m) {
		return modelJSON{preset: m.Name}
	}
	return modelJSON{custom: &customModelJSON{Name: m.Name, Arch: m.Arch, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
		Intermediate: m.Intermediate, Vocab: m.Vocab, MaxPositions: m.MaxPositions,
		TypeVocab: m.TypeVocab, PositionBuckets: m.PositionBuckets, Labels: m.Labels}}
}

// model resolves a preset's name or builds the custom shape.
func (m modelJSON) model() (trial.Model, error) {
	if m.custom == nil {
		return trial.LookupModel(m.preset) // its error lists the known names
	}
	c := m.custom
	return trial.Model{Name: c.Name, Arch: c.Arch, Layers: c.Layers, Hidden: c.Hidden, Heads: c.Heads,
		Intermediate: c.Intermediate, Vocab: c.Vocab, MaxPositions: c.MaxPositions,
		TypeVocab: c.TypeVocab, PositionBuckets: c.PositionBuckets, Labels: c.Labels}, nil
}

func (m modelJSON) MarshalJSON() ([]byte, error) {
	if m.custom != nil {
		return json.Marshal(m.custom)
	}
	return json.Marshal(m.preset)
}

func (c choicesJSON) toChoices() Choices {
	return Choices{BatchSizes: c.BatchSizes, SeqLens: c.SeqLens, GradAccum: c.GradAccum,
		Precisions: c.Precisions, Optimizers: c.Optimizers, Checkpointing: c.Checkpointing,
		Attention: c.Attention, DynamicPadding: c.DynamicPad, KeepGrads: c.KeepGrads, Compile: c.Compile}
}

func fromChoices(c Choices) choicesJSON {
	return choicesJSON{BatchSizes: c.BatchSizes, SeqLens: c.SeqLens, GradAccum: c.GradAccum,
		Precisions: c.Precisions, Optimizers: c.Optimizers, Checkpointing: c.Checkpointing,
		Attention: c.Attention, DynamicPad: c.DynamicPadding, KeepGrads: c.KeepGrads, Compile: c.Compile}
}

// MarshalJSON writes the space in LoadSpace's format; presets by name.
func (s Space) MarshalJSON() ([]byte, error) {
	j := spaceJSON{Name: s.Name, Choices: fromChoices(s.Choices), MaxEffectiveBatch: s.MaxEffectiveBatch,
		Steps: s.Steps, EvalEvery: s.EvalEvery, EvalBatches: s.EvalBatches}
	for _, m := range s.Models {
		j.Models = append(j.Models, toModelJSON(m))
	}
	for _, o := range s.Overrides {
		j.Overrides = append(j.Overrides, overrideJSON{Name: o.Name, Match: o.Match, Choices: fromChoices(o.Choices)})
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads LoadSpace's format, fills the defaults and validates;
// errors name the field.
func (s *Space) UnmarshalJSON(b []byte) error {
	sp, err := parseSpace(b)
	if err != nil {
		return err
	}
	*s = sp
	return nil
}

// MaxSpaceBytes bounds a search space file: the BERT-family study is about
// 2 KiB of JSON, and a space of a hundred custom models under 100 KiB.
// The bound keeps a wrong path (/dev/zero, a trace) from filling memory.
const MaxSpaceBytes = 1 << 20

// LoadSpace reads a space from a JSON file. Errors name the file and the
// field (and the line and column for malformed JSON).
func LoadSpace(path string) (Space, error) {
	f, err := os.Open(path)
	if err != nil {
		return Space{}, err
	}
	defer f.Close()
	return readSpace(f, path, MaxSpaceBytes)
}

// readSpace reads and parses a space of at most max bytes from r (path
// names it in errors).
func readSpace(r io.Reader, path string, max int) (Space, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return Space{}, fmt.Errorf("%s: %v", path, err)
	}
	if len(b) > max {
		return Space{}, fmt.Errorf("%s: larger than %d bytes: not a search space file", path, max)
	}
	s, err := parseSpace(b)
	var pe *posError
	switch {
	case errors.As(err, &pe):
		return Space{}, fmt.Errorf("%s:%d:%d: %s", path, pe.line, pe.col, pe.msg)
	case err != nil:
		return Space{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// posError is an error at a line and column of the JSON text.
type posError struct {
	line, col int
	msg       string
}

func (e *posError) Error() string { return fmt.Sprintf("%d:%d: %s", e.line, e.col, e.msg) }

func newPosError(b []byte, off int64, format string, args ...any) error {
	line, col := lineCol(b, off)
	return &posError{line, col, fmt.Sprintf(format, args...)}
}

// ParseSpace reads a space from JSON text; errors name the field (and the
// line and column for malformed JSON).
func ParseSpace(b []byte) (Space, error) { return parseSpace(b) }

func parseSpace(b []byte) (Space, error) {
	var j spaceJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return Space{}, jsonError(b, err)
	}
	if d.More() {
		return Space{}, newPosError(b, d.InputOffset(), "text after the space's closing brace")
	}
	s := Space{Name: j.Name, Choices: j.Choices.toChoices(), MaxEffectiveBatch: j.MaxEffectiveBatch,
		Steps: j.Steps, EvalEvery: j.EvalEvery, EvalBatches: j.EvalBatches}
	for i, mj := range j.Models {
		m, err := mj.model()
		if err != nil {
			return Space{}, fmt.Errorf("models[%d]: %v", i, err)
		}
		s.Models = append(s.Models, m)
	}
	for _, o := range j.Overrides {
		s.Overrides = append(s.Overrides, Override{Name: o.Name, Match: o.Match, Choices: o.Choices.toChoices()})
	}
	c := &s.Choices
	if len(c.GradAccum) == 0 {
		c.GradAccum = []int{1}
	}
	if len(c.Precisions) == 0 {
		c.Precisions = []trial.Precision{trial.FP32}
	}
	if len(c.Optimizers) == 0 {
		c.Optimizers = []string{"adamw"}
	}
	if len(c.Checkpointing) == 0 {
		c.Checkpointing = []bool{false}
	}
	if len(c.Attention) == 0 {
		c.Attention = []string{trial.Eager}
	}
	if len(c.DynamicPadding) == 0 {
		c.DynamicPadding = []bool{false}
	}
	if err := s.Validate(); err != nil {
		return Space{}, err
	}
	return s, nil
}

// jsonError turns encoding/json's errors into "line:col: field x: ..." text.
func jsonError(b []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return newPosError(b, se.Offset, "%v", se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return newPosError(b, te.Offset, "field %s: want %v, got JSON %s", field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return errors.New("empty file: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newPosError(b, int64(len(b)), "unexpected end of JSON")
	}
	// Unknown fields ("json: unknown field \"x\"") and our own model errors
	// carry no offset; their text names the field.
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// lineCol is the 1-based line and column of byte offset off in b.
func lineCol(b []byte, off int64) (int, int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	if off < 0 {
		off = 0
	}
	pre := b[:off]
	line := bytes.Count(pre, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(pre, '\n')
	return line, col
}

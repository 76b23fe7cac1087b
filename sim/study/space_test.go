package study

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/trial"
)

func isHeavy(name string) bool {
	return strings.Contains(name, "large") || strings.Contains(name, "xlm-roberta")
}

func TestBERTFamilySpaceIsTheStudys(t *testing.T) {
	s := BERTFamilySpace()
	require.NoError(t, s.Validate())
	require.Len(t, s.Models, 7)
	// Seed 002: base 7 x 6 x 13 = 546 combinations per model, heavy
	// 3 x 4 x 9 = 108; three base models and four heavy ones (the three
	// large ones and xlm-roberta-base).
	require.Equal(t, 3*546+4*108, s.GridSize())
	g := s.Grid()
	require.Len(t, g, s.GridSize())
	for _, sp := range g {
		require.NoError(t, sp.Validate(), sp.String())
		if isHeavy(sp.Model.Name) {
			require.LessOrEqual(t, sp.Batch, 16, sp.String())
			require.LessOrEqual(t, sp.SeqLen, 384, sp.String())
			require.LessOrEqual(t, sp.GradAccum, 4, sp.String())
		}
	}
	// Before the fix every model drew from the same lists.
	require.Equal(t, 7*546, s.Unconstrained().GridSize())
}

func TestSampleHonoursConstraintsAndCoversChoices(t *testing.T) {
	s := BERTFamilySpace()
	rng := rand.New(rand.NewPCG(1, 2))
	seenBatch := map[string]map[int]bool{"heavy": {}, "base": {}}
	for range 5000 {
		sp := s.Sample(rng)
		require.NoError(t, sp.Validate())
		k := "base"
		if isHeavy(sp.Model.Name) {
			k = "heavy"
			require.LessOrEqual(t, sp.Batch, 16)
			require.LessOrEqual(t, sp.SeqLen, 384)
			require.LessOrEqual(t, sp.GradAccum, 4)
		}
		seenBatch[k][sp.Batch] = true
	}
	assert.Len(t, seenBatch["base"], 7, "every base batch size is drawn")
	assert.Len(t, seenBatch["heavy"], 3, "every heavy batch size is drawn")

	// Without the constraints a heavy model draws the big batches too.
	u := BERTFamilySpace().Unconstrained()
	big := false
	for range 2000 {
		sp := u.Sample(rng)
		if isHeavy(sp.Model.Name) && sp.Batch > 16 {
			big = true
			break
		}
	}
	assert.True(t, big)
}

func TestSampleIsAFunctionOfTheRNGSeed(t *testing.T) {
	s := BERTFamilySpace()
	for id := range uint64(50) {
		a := s.Sample(rand.New(rand.NewPCG(7, id)))
		b := s.Sample(rand.New(rand.NewPCG(7, id)))
		require.Equal(t, a, b)
	}
	a := s.Sample(rand.New(rand.NewPCG(7, 1)))
	b := s.Sample(rand.New(rand.NewPCG(7, 2)))
	require.NotEqual(t, a, b)
}

func TestMaxEffectiveBatch(t *testing.T) {
	s := BERTFamilySpace()
	s.MaxEffectiveBatch = 64
	require.NoError(t, s.Validate())
	rng := rand.New(rand.NewPCG(3, 3))
	for range 2000 {
		sp := s.Sample(rng)
		require.LessOrEqual(t, sp.Batch*sp.GradAccum, 64)
	}
	g := s.Grid()
	require.Len(t, g, s.GridSize())
	for _, sp := range g {
		require.LessOrEqual(t, sp.Batch*sp.GradAccum, 64)
	}
	s.MaxEffectiveBatch = 4
	require.ErrorContains(t, s.Validate(), "max_effective_batch 4")
}

func TestSpaceJSONRoundTrip(t *testing.T) {
	s := BERTFamilySpace()
	s.Models = append(s.Models, trial.Model{Name: "tiny", Layers: 2, Hidden: 128, Heads: 2, Intermediate: 512, Vocab: 1000, MaxPositions: 512})
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"bert-base"`)
	require.Contains(t, string(b), `"layers":2`)
	back, err := ParseSpace(b)
	require.NoError(t, err)
	require.Equal(t, s, back)
}

func TestLoadSpace(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "space.json")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	s, err := LoadSpace(write(`{"name": "small", "models": ["bert-base"],
		"choices": {"batch_sizes": [8, 16], "seq_lens": [128]}}`))
	require.NoError(t, err)
	require.Equal(t, []int{1}, s.Choices.GradAccum)
	require.Equal(t, []trial.Precision{trial.FP32}, s.Choices.Precisions)
	require.Equal(t, 2, s.GridSize())

	for _, c := range []struct{ body, want string }{
		{``, "space.json: empty file"},
		{`{"models": ["bert-base"],`, "space.json:1:"},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128]}} {}`, "text after"},
		{"{\n  \"models\": [\"bert-base\"],\n  \"choices\": {\"batch_sizes\": [\"8\"], \"seq_lens\": [128]}}", "space.json:3:"},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": ["8"], "seq_lens": [128]}}`, "choices.batch_sizes"},
		{`{"models": ["bert-base"], "choices": {"batch_size": [8], "seq_lens": [128]}}`, `unknown field "batch_size"`},
		{`{"models": ["bert-huge"], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`, `models[0]`},
		{`{"models": [], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`, `models: empty`},
		{`{"models": [3], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`, `preset's name or an object`},
		{`{"models": [{"name": "x", "layer": 2}], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`, `unknown field "layer"`},
		{`{"models": ["bert-base"], "choices": {"seq_lens": [128]}}`, `choices.batch_sizes: empty`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8, 0], "seq_lens": [128]}}`, `choices.batch_sizes[1]: 0`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128], "precisions": ["fp8"]}}`, `choices.precisions[0]: "fp8"`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128], "optimizers": ["adam"]}}`, `choices.optimizers[0]: "adam"`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128]}, "overrides": [{"match": []}]}`, `overrides[0].match: empty`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128]}, "overrides": [{"match": ["x"], "choices": {"seq_lens": [-1]}}]}`, `overrides[0].choices.seq_lens[0]: -1`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128]}, "steps": -1}`, `steps: -1 is negative`},
	} {
		_, err := LoadSpace(write(c.body))
		require.Error(t, err, c.body)
		require.Contains(t, err.Error(), "space.json", c.body)
		require.Contains(t, err.Error(), c.want, c.body)
	}
	_, err = LoadSpace(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "missing.json")
}

func FuzzParseSpace(f *testing.F) {
	b, _ := json.Marshal(BERTFamilySpace())
	f.Add(b)
	f.Add([]byte(`{"models": ["bert-base", {"name": "t", "layers": 1, "hidden": 64, "heads": 1, "intermediate": 64, "vocab": 10, "max_positions": 64}], "choices": {"batch_sizes": [1], "seq_lens": [8]}, "max_effective_batch": 1}`))
	f.Add([]byte(`{"models": ["bert-base"], "choices": {"batch_sizes": [8]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpace(b)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		// A space that parses samples and round-trips.
		sp := s.Sample(rand.New(rand.NewPCG(1, 1)))
		require.NoError(t, sp.Validate())
		out, err := json.Marshal(s)
		require.NoError(t, err)
		back, err := ParseSpace(out)
		require.NoError(t, err)
		require.Equal(t, s, back)
	})
}

// TestUnknownModelListsTheNamesOnce: a space naming a model that is not a
// preset says which are, once (it said them twice, "(known: ...)" and
// again "(presets: ...)").
func TestUnknownModelListsTheNamesOnce(t *testing.T) {
	_, err := ParseSpace([]byte(`{"name": "x", "models": ["bert-huge"], "choices": {"batch_sizes": [8], "seq_lens": [128]}}`))
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `models[0]: unknown model "bert-huge" (known: `)
	require.Equal(t, 1, strings.Count(msg, "bert-base"), msg)
}

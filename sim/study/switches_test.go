package study

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/trial"
)

// The trial model's program switches in a space file: keep_grads, compile
// and attention "manual" (docs/trial-model.md).

const lmSpace = `{"name": "lm",
	"models": [{"name": "lm", "arch": "decoder-lm", "layers": 2, "hidden": 64, "heads": 4,
	            "intermediate": 256, "vocab": 500, "max_positions": 128}],
	"choices": {"batch_sizes": [2], "seq_lens": [64], "attention": ["manual", "sdpa"],
	            "keep_grads": [true], "compile": [false, true]}}`

func TestSpaceProgramSwitches(t *testing.T) {
	s, err := ParseSpace([]byte(lmSpace))
	require.NoError(t, err)
	g := s.Grid()
	require.Len(t, g, 4)
	require.Equal(t, len(g), s.GridSize())
	type sw struct {
		att       string
		keep, cmp bool
	}
	var got []sw
	for _, sp := range g {
		got = append(got, sw{sp.Attention, sp.KeepGrads, sp.Compile})
		require.NoError(t, sp.Validate())
	}
	require.Equal(t, []sw{{"manual", true, false}, {"manual", true, true}, {"sdpa", true, false}, {"sdpa", true, true}}, got)

	// The switches survive the round trip through JSON and the state file.
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"keep_grads":[true]`)
	require.Contains(t, string(b), `"compile":[false,true]`)
	back, err := ParseSpace(b)
	require.NoError(t, err)
	require.Equal(t, s, back)
	for _, sp := range g {
		rt, err := specJSON(sp).Spec()
		require.NoError(t, err)
		require.Equal(t, sp, rt)
	}

	// Manual attention on DeBERTa is its own (hand-written) attention.
	require.Equal(t, trial.Eager, attentionFor(trial.Model{Arch: trial.DeBERTa}, trial.Manual))

	for _, c := range []struct{ body, want string }{
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128], "attention": ["flash"]}}`, `choices.attention[0]: "flash", want eager, sdpa or manual`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128], "compile": [true]}}`, `compile[0] = true: compile is modelled for decoder-lm only`},
		{`{"models": ["bert-base"], "choices": {"batch_sizes": [8], "seq_lens": [128], "keep_grad": [true]}}`, `unknown field "keep_grad"`},
	} {
		_, err := ParseSpace([]byte(c.body))
		require.ErrorContains(t, err, c.want)
	}
}

// A switch given one value draws nothing: the rest of every sample is what
// the same space without the switch samples, so spaces written before the
// switches existed sample as they did.
func TestSampleSwitchOfOneValueDrawsNothing(t *testing.T) {
	without := SeedsSpace()
	with := SeedsSpace()
	with.Choices.KeepGrads = []bool{true}
	r1, r2 := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 50; i++ {
		a, b := without.Sample(r1), with.Sample(r2)
		require.False(t, a.KeepGrads)
		require.True(t, b.KeepGrads)
		b.KeepGrads = false
		require.Equal(t, a, b)
	}
	// Two values are drawn, and both come up.
	with.Choices.KeepGrads = []bool{false, true}
	seen := map[bool]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		seen[with.Sample(r).KeepGrads] = true
	}
	require.Len(t, seen, 2)
}

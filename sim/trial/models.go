package trial

import (
	"fmt"
	"sort"
	"strings"
)

// Arch is the layer recipe of a Model: which tensors a layer owns and what
// its forward pass allocates.
type Arch string

const (
	// Encoder is BERT, RoBERTa and XLM-RoBERTa as Hugging Face implements
	// them: learned absolute positions (and token types), post-LayerNorm
	// layers with biases, GELU FFN, dropout after attention probabilities
	// and after each sublayer, and a sequence-classification head.
	Encoder Arch = "encoder"
	// DeBERTa is DeBERTa-v2/v3: an Encoder without absolute positions whose
	// attention adds disentangled content-to-position and
	// position-to-content scores over relative-position buckets (more
	// batch*heads*seq*seq tensors per layer than BERT).
	DeBERTa Arch = "deberta"
	// DecoderLM is a pre-norm causal language model in the shape of the
	// CS336 Transformer LM (and Llama): RoPE, RMSNorm, SwiGLU FFN, no
	// biases, no dropout, token embeddings and an untied LM head; the loss
	// is over every position (logits batch*seq*vocab).
	DecoderLM Arch = "decoder-lm"
)

// Model is a transformer's shape.
type Model struct {
	Name                  string
	Arch                  Arch // "" means Encoder
	Layers, Hidden, Heads int
	Intermediate          int
	Vocab, MaxPositions   int
	TypeVocab             int // token-type embeddings rows (BERT 2, RoBERTa 1, DeBERTa-v3 0)
	PositionBuckets       int // DeBERTa relative-position buckets (256 in v3); the table has 2x rows
	Labels                int // classifier outputs (Encoder, DeBERTa); 0 means 2
}

func (m Model) arch() Arch {
	if m.Arch == "" {
		return Encoder
	}
	return m.Arch
}

func (m Model) labels() int {
	if m.Labels <= 0 {
		return 2
	}
	return m.Labels
}

var models = []Model{
	{Name: "bert-base", Arch: Encoder, Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072, Vocab: 30522, MaxPositions: 512, TypeVocab: 2},
	{Name: "bert-large", Arch: Encoder, Layers: 24, Hidden: 1024, Heads: 16, Intermediate: 4096, Vocab: 30522, MaxPositions: 512, TypeVocab: 2},
	{Name: "roberta-base", Arch: Encoder, Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072, Vocab: 50265, MaxPositions: 514, TypeVocab: 1},
	{Name: "roberta-large", Arch: Encoder, Layers: 24, Hidden: 1024, Heads: 16, Intermediate: 4096, Vocab: 50265, MaxPositions: 514, TypeVocab: 1},
	{Name: "deberta-v3-base", Arch: DeBERTa, Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072, Vocab: 128100, MaxPositions: 512, TypeVocab: 0, PositionBuckets: 256},
	{Name: "deberta-v3-large", Arch: DeBERTa, Layers: 24, Hidden: 1024, Heads: 16, Intermediate: 4096, Vocab: 128100, MaxPositions: 512, TypeVocab: 0, PositionBuckets: 256},
	{Name: "xlm-roberta-base", Arch: Encoder, Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072, Vocab: 250002, MaxPositions: 514, TypeVocab: 1},
}

// Models lists the built-in shapes (Hugging Face configs of the BERT-family study'
// models).
func Models() []Model { return append([]Model(nil), models...) }

// aliases maps Hugging Face hub names to the built-in names.
var aliases = map[string]string{
	"bert-base-uncased": "bert-base", "bert-base-cased": "bert-base",
	"bert-large-uncased": "bert-large", "bert-large-cased": "bert-large",
	"microsoft/deberta-v3-base": "deberta-v3-base", "microsoft/deberta-v3-large": "deberta-v3-large",
	"facebookai/roberta-base": "roberta-base", "facebookai/roberta-large": "roberta-large",
	"facebookai/xlm-roberta-base": "xlm-roberta-base",
}

// LookupModel returns one of Models() by Name (or a Hugging Face hub name
// such as "bert-base-uncased").
func LookupModel(name string) (Model, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	for _, m := range models {
		if m.Name == n {
			return m, nil
		}
	}
	var names []string
	for _, m := range models {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return Model{}, fmt.Errorf("unknown model %q (known: %s)", name, strings.Join(names, ", "))
}

// Validate checks the shape.
func (m Model) Validate() error {
	switch m.arch() {
	case Encoder, DeBERTa, DecoderLM:
	default:
		return fmt.Errorf("model %q: unknown arch %q (encoder, deberta, decoder-lm)", m.Name, m.Arch)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", m.Layers}, {"hidden", m.Hidden}, {"heads", m.Heads}, {"intermediate", m.Intermediate}, {"vocab", m.Vocab}} {
		if f.v <= 0 {
			return fmt.Errorf("model %q: %s must be positive, got %d", m.Name, f.name, f.v)
		}
	}
	if m.Hidden%m.Heads != 0 {
		return fmt.Errorf("model %q: hidden %d is not a multiple of heads %d", m.Name, m.Hidden, m.Heads)
	}
	if m.MaxPositions < 0 || m.TypeVocab < 0 || m.PositionBuckets < 0 || m.Labels < 0 {
		return fmt.Errorf("model %q: negative max positions, type vocab, buckets or labels", m.Name)
	}
	if m.arch() == DeBERTa && m.PositionBuckets == 0 {
		return fmt.Errorf("model %q: deberta needs position buckets", m.Name)
	}
	// Bounds that keep every size product (and Estimate's sums) far from
	// overflowing uint64.
	if m.Layers > 1024 {
		return fmt.Errorf("model %q: %d layers is out of range (max 1024)", m.Name, m.Layers)
	}
	const limit = 1 << 22
	for _, v := range []int{m.Hidden, m.Heads, m.Intermediate, m.Vocab, m.MaxPositions, m.PositionBuckets, m.Labels} {
		if v > limit {
			return fmt.Errorf("model %q: dimension %d is out of range (max %d)", m.Name, v, limit)
		}
	}
	return nil
}

// param is one parameter tensor of the model, in named_parameters order.
type param struct {
	site  siteKey
	elems uint64
	decay bool // in the weight-decay group (HF: not biases, not LayerNorm)
	layer int  // -1 outside the layers
}

// params lists the model's parameters in the order model.to(device) copies
// them (module registration order).
func (m Model) params() []param {
	H, I, V := u(m.Hidden), u(m.Intermediate), u(m.Vocab)
	var ps []param
	add := func(layer int, kind string, elems uint64, decay bool) {
		ps = append(ps, param{site: siteKey{layer, kind}, elems: elems, decay: decay, layer: layer})
	}
	switch m.arch() {
	case DecoderLM:
		add(-1, "embeddings.token", V*H, true)
		for l := 0; l < m.Layers; l++ {
			add(l, "ln1.weight", H, false)
			for _, k := range []string{"attention.q.weight", "attention.k.weight", "attention.v.weight", "attention.output.weight"} {
				add(l, k, H*H, true)
			}
			add(l, "ln2.weight", H, false)
			add(l, "ffn.w1.weight", I*H, true)
			add(l, "ffn.w2.weight", H*I, true)
			add(l, "ffn.w3.weight", I*H, true)
		}
		add(-1, "ln_final.weight", H, false)
		add(-1, "lm_head.weight", V*H, true)
		return ps
	}
	add(-1, "embeddings.word", V*H, true)
	if m.arch() == Encoder {
		add(-1, "embeddings.position", u(m.MaxPositions)*H, true)
	}
	if m.TypeVocab > 0 {
		add(-1, "embeddings.token_type", u(m.TypeVocab)*H, true)
	}
	add(-1, "embeddings.LayerNorm.weight", H, false)
	add(-1, "embeddings.LayerNorm.bias", H, false)
	for l := 0; l < m.Layers; l++ {
		for _, k := range []string{"attention.q", "attention.k", "attention.v"} {
			add(l, k+".weight", H*H, true)
			add(l, k+".bias", H, false)
		}
		add(l, "attention.output.weight", H*H, true)
		add(l, "attention.output.bias", H, false)
		add(l, "attention.LayerNorm.weight", H, false)
		add(l, "attention.LayerNorm.bias", H, false)
		add(l, "intermediate.weight", I*H, true)
		add(l, "intermediate.bias", I, false)
		add(l, "output.weight", H*I, true)
		add(l, "output.bias", H, false)
		add(l, "output.LayerNorm.weight", H, false)
		add(l, "output.LayerNorm.bias", H, false)
	}
	if m.arch() == DeBERTa {
		add(-1, "encoder.rel_embeddings", 2*u(m.PositionBuckets)*H, true)
		add(-1, "encoder.LayerNorm.weight", H, false)
		add(-1, "encoder.LayerNorm.bias", H, false)
	}
	L := u(m.labels())
	add(-1, "head.dense.weight", H*H, true)
	add(-1, "head.dense.bias", H, false)
	add(-1, "head.out.weight", L*H, true)
	add(-1, "head.out.bias", L, false)
	return ps
}

// Params is the model's parameter count (from its tables: every phase's
// duration asks).
func (m Model) Params() uint64 { return tablesOf(m).count }

func u(v int) uint64 { return uint64(v) }

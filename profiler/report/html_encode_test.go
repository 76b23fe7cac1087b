package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator/config"
	"github.com/memreplay/memreplay/profiler"
)

// requireAsMarshal checks that the hand-written encoder gives what
// json.Marshal gives for d: the same bytes, or the same error.
func requireAsMarshal(t *testing.T, d *htmlData, what string) {
	t.Helper()
	want, werr := json.Marshal(d)
	var buf bytes.Buffer
	gerr := writeData(&buf, d)
	if werr != nil || gerr != nil {
		require.Error(t, werr, "%s: json.Marshal succeeded, the encoder failed: %v", what, gerr)
		require.Error(t, gerr, "%s: the encoder succeeded, json.Marshal failed: %v", what, werr)
		require.Equal(t, werr.Error(), gerr.Error(), what)
		require.IsType(t, werr, gerr, what)
		require.Zero(t, buf.Len(), "%s: written before the error", what)
		return
	}
	got := buf.Bytes()
	if !bytes.Equal(want, got) {
		i := 0
		for i < len(want) && i < len(got) && want[i] == got[i] {
			i++
		}
		from := max(0, i-80)
		t.Fatalf("%s: the encoder differs from json.Marshal at byte %d of %d:\njson: %s\n got: %s", what, i, len(want),
			want[from:min(len(want), i+80)], got[from:min(len(got), i+80)])
	}
}

// TestDataEncoderRealSnapshots: the page's document of every real
// snapshot, one run each and three runs of one snapshot under different
// settings (best or tied), byte for byte as json.Marshal writes it.
func TestDataEncoderRealSnapshots(t *testing.T) {
	paths := realSnapshotPaths(t)
	for _, path := range paths {
		in := realInput(t, path, nil)
		d, err := buildHTMLData(&HTMLReport{Runs: []HTMLRun{{Label: "recorded", Input: in}}})
		require.NoError(t, err)
		requireAsMarshal(t, d, path)
	}
	exp, err := config.Parse("expandable_segments:True")
	require.NoError(t, err)
	small, err := config.Parse("max_split_size_mb:20,garbage_collection_threshold:0.5")
	require.NoError(t, err)
	r := &HTMLReport{}
	for i, c := range []*config.Config{nil, &exp, &small} {
		r.Runs = append(r.Runs, HTMLRun{Label: fmt.Sprint("setting ", i), Input: realInput(t, paths[0], c)})
	}
	d, err := buildHTMLData(r)
	require.NoError(t, err)
	requireAsMarshal(t, d, paths[0]+" under three settings")
}

// TestDataEncoderAsMarshal: documents filled at random through reflection,
// every field of every type in them (a field added to a type and not to
// the encoder fails here), with strings and floats drawn from every escape
// and format case, nil and empty slices, maps and pointers.
func TestDataEncoderAsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 1))
	all := map[string]bool{}
	typePaths("", reflect.TypeFor[htmlData](), all)
	paths := maps.Clone(all)
	for i := range 3000 {
		var d htmlData
		f := filler{rng: rng, nonFinite: i%10 == 9}
		f.fill(reflect.ValueOf(&d).Elem(), 0)
		requireAsMarshal(t, &d, fmt.Sprintf("document %d", i))
		if b, err := json.Marshal(&d); err == nil {
			var v any
			require.NoError(t, json.Unmarshal(b, &v))
			valuePaths("", v, all, paths)
		}
	}
	require.Empty(t, paths, "fields the random documents never had")
}

// typePaths adds the path of every field reachable from t: json names
// joined by dots, "[]" for an array's element, "{}" for a map's value.
func typePaths(prefix string, t reflect.Type, out map[string]bool) {
	switch t.Kind() {
	case reflect.Pointer:
		typePaths(prefix, t.Elem(), out)
	case reflect.Slice, reflect.Array:
		typePaths(prefix+"[]", t.Elem(), out)
	case reflect.Map:
		out[prefix+"{}"] = true
		typePaths(prefix+"{}", t.Elem(), out)
	case reflect.Struct:
		for i := range t.NumField() {
			fl := t.Field(i)
			name, _, _ := strings.Cut(fl.Tag.Get("json"), ",")
			if fl.IsExported() && name != "-" {
				out[prefix+"."+name] = true
				typePaths(prefix+"."+name, fl.Type, out)
			}
		}
	}
}

// valuePaths deletes from missing the paths (of all, typePaths') that v,
// a decoded document, has.
func valuePaths(prefix string, v any, all, missing map[string]bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			valuePaths(prefix+"[]", e, all, missing)
		}
	case map[string]any:
		for k, e := range x {
			p := prefix + "." + k
			if all[prefix+"{}"] {
				p = prefix + "{}" // a map's key, not a field
			}
			delete(missing, p)
			valuePaths(p, e, all, missing)
		}
	}
}

// TestDataEncoderNonFinite: NaN and the infinities fail as json.Marshal
// fails (the same message), and WriteHTML then writes nothing.
func TestDataEncoderNonFinite(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		d := &htmlData{Runs: []htmlRun{{Report: &jsonReport{Fragmentation: jsonFragmentation{MaxExternalFragmentation: x}}}}}
		requireAsMarshal(t, d, fmt.Sprint(x))
		err := writeData(io.Discard, d)
		require.ErrorContains(t, err, "json: unsupported value: ")
	}
	in := &Input{Profile: &profiler.Profile{Total: profiler.Figures{WasteRatio: math.NaN()}}}
	var b bytes.Buffer
	require.EqualError(t, WriteHTML(&b, &HTMLReport{Runs: []HTMLRun{{Input: in}}}), "json: unsupported value: NaN")
	require.Zero(t, b.Len())
}

// FuzzDataEncoderStrings puts one string and one float in every kind of
// place the document has for them: keys, labels, frames, messages,
// fragmentation ratios, PAR cells.
func FuzzDataEncoderStrings(f *testing.F) {
	for _, s := range edgeStrings {
		f.Add(s, 0.5)
	}
	for _, x := range edgeFloats {
		f.Add("x", x)
	}
	f.Fuzz(func(t *testing.T, s string, x float64) {
		frag := jsonFragmentation{WasteRatio: x, ExternalFragmentationAtPeak: -x, MaxExternalFragmentation: x * 3}
		rep := &jsonReport{Source: s, File: s + s, Stats: map[string]int64{s: 1, s + "a": 2, "b" + s: 3},
			Fragmentation: frag, Notes: []string{s}, TopSites: []jsonSite{{Label: s, Frames: []string{s, "<" + s + ">"}}},
			Devices: []jsonDevice{{Name: s, Fragmentation: &frag, Calls: map[string]jsonCallCount{s: {Calls: 1}}}}}
		d := &htmlData{Runs: []htmlRun{{Label: s, Report: rep, Sites: map[string]htmlSite{s: {Name: s, Frames: []string{s}}},
			OOMs: []htmlOOM{{Message: s}}, Captures: []htmlCapture{{Title: s, Kind: s}}}},
			PAR: &htmlPAR{Title: s, Settings: []string{s}, POOM: [][]*float64{{&x, nil}}, ThroughputUnit: s}}
		requireAsMarshal(t, d, fmt.Sprintf("%q %v", s, x))
	})
}

// edgeStrings are strings with every case json.Marshal escapes.
var edgeStrings = []string{
	"", "plain", `"quoted" \back\slash/`, "<script>&</script>", "a\u2028b\u2029c", "\u2027\u202a",
	"\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x20\x7f", "bad \xff utf-8 \xc3", "\xed\xa0\x80 surrogate",
	"truncated \xe2\x80", "é ü 日本 🙂", "\ufffd", "N/A", "torch::autograd::Engine::evaluate_function (engine.cpp:1031)",
}

// edgeFloats are floats at encoding/json's format boundaries.
var edgeFloats = []float64{
	0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 1e-6, 9.999999e-7, 1e-7, -1e-7, 1e20, 1e21, 9.99e20, -1e21, 1e100,
	1e-100, 5e-324, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789.123, 1e-9, 2.5e-10,
	0.000001, 0.0000012345, 100, 1.5e300,
}

// filler fills a value at random through reflection.
type filler struct {
	rng       *rand.Rand
	nonFinite bool // now and then a NaN or an infinity
}

func (f *filler) str() string {
	switch f.rng.IntN(4) {
	case 0:
		return edgeStrings[f.rng.IntN(len(edgeStrings))]
	case 1: // random bytes, valid UTF-8 or not
		b := make([]byte, f.rng.IntN(12))
		for i := range b {
			b[i] = byte(f.rng.IntN(256))
		}
		return string(b)
	case 2: // random runes, the separators among them
		var b []byte
		for range f.rng.IntN(8) {
			r := rune(f.rng.IntN(0x3000))
			if f.rng.IntN(4) == 0 {
				r = []rune{'\u2028', '\u2029', '<', '>', '&', '"', '\\', 0x7f, utf8.MaxRune}[f.rng.IntN(9)]
			}
			b = utf8.AppendRune(b, r)
		}
		return string(b)
	default:
		return fmt.Sprint(f.rng.IntN(1000))
	}
}

func (f *filler) float() float64 {
	switch n := f.rng.IntN(20); {
	case n == 0 && f.nonFinite:
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[f.rng.IntN(3)]
	case n < 8:
		return edgeFloats[f.rng.IntN(len(edgeFloats))]
	case n < 12:
		return f.rng.Float64()
	default: // any magnitude
		x := math.Float64frombits(f.rng.Uint64())
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0.25
		}
		return x
	}
}

func (f *filler) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.str())
	case reflect.Bool:
		v.SetBool(f.rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := []int64{0, -1, 1, math.MaxInt64, math.MinInt64, f.rng.Int64N(1 << 40), -f.rng.Int64N(1000)}[f.rng.IntN(7)]
		if v.OverflowInt(x) {
			x = int64(int32(x))
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x := []uint64{0, 1, math.MaxUint64, f.rng.Uint64(), f.rng.Uint64N(1 << 30)}[f.rng.IntN(5)]
		if v.OverflowUint(x) {
			x = uint64(uint32(x))
		}
		v.SetUint(x)
	case reflect.Float64:
		v.SetFloat(f.float())
	case reflect.Pointer:
		if depth > 8 || f.rng.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		k := f.rng.IntN(5)
		if depth > 8 || k == 0 {
			return // nil
		}
		n := k - 1
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), depth)
		}
	case reflect.Map:
		k := f.rng.IntN(5)
		if depth > 8 || k == 0 {
			return // nil
		}
		m := reflect.MakeMap(v.Type())
		for range k - 1 {
			key := reflect.New(v.Type().Key()).Elem()
			f.fill(key, depth+1)
			val := reflect.New(v.Type().Elem()).Elem()
			f.fill(val, depth+1)
			m.SetMapIndex(key, val)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth)
			}
		}
	default:
		panic("filler: no case for " + v.Type().String())
	}
}

// TestPlainWord: a word is plain exactly when each of its bytes is one
// json.Marshal copies as it is: every byte value at every position, among
// plain bytes and beside every other byte value.
func TestPlainWord(t *testing.T) {
	plainByte := func(c byte) bool { return c < utf8.RuneSelf && jsonSafe[c] }
	for c := range 256 {
		for pos := range 8 {
			for _, other := range []byte{'a', ' ', '~', 0x7f} {
				w := bytes.Repeat([]byte{other}, 8)
				w[pos] = byte(c)
				require.Equal(t, plainByte(byte(c)), plainWord(load64(string(w))), "byte %#x at %d among %q", c, pos, other)
			}
		}
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for range 200000 {
		var w [8]byte
		want := true
		for i := range w {
			w[i] = byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				w[i] = byte(0x20 + rng.IntN(0x60))
			}
			want = want && plainByte(w[i])
		}
		require.Equal(t, want, plainWord(load64(string(w[:]))), "%q", w)
	}
}

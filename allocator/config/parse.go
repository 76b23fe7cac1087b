package config

// Settings strings follow PyTorch's allocator configuration syntax:
//
//	settings = option { "," option }
//	option   = key ":" value | key ":" "[" entry { "," entry } "]"
//	entry    = key ":" value
//
// Lexing (lex.go): the characters , : [ ] each end a token and are tokens
// themselves; whitespace is dropped (the old lexer drops only ' ', the new
// ConfigTokenizer any C isspace). Booleans are exactly True or False. Every
// parse first resets max_split_size_mb (to Unlimited),
// roundup_power2_divisions (all 0) and garbage_collection_threshold (0);
// every other option keeps its value unless the string names it.
//
// The two dialects are two different programs, ported here separately:
//
// DialectOld (dialect_old.go) is CUDAAllocatorConfig::parseArgs of PyTorch
// 2.0 to 2.8: one pass, consumeToken really checks each ":" and ",", a
// missing value is "Error, expecting <option> value", unknown keys are
// "Unrecognized CachingAllocator option: <key>", max_split_size_mb and
// max_non_split_rounding_mb must be > 20, integers are read with stoi (so a
// negative number wraps to a huge size_t), and `>` in roundup_power2_divisions
// fills from the last explicit entry onward, overwriting it. It knows no
// option newer than 2.8 (per_process_memory_fraction, large_segment_size_mb,
// throw_on_cudamalloc_oom, pinned_free_catch_all, pinned_max_*,
// expandable_segments_reserve*): they are unrecognized.
//
// DialectNew (dialect_new.go, with tokenizer.go and reserve.go) is PyTorch 2.9's
// AcceleratorAllocatorConfig::parseArgs followed by the CUDA hook
// CUDAAllocatorConfig::parseArgs, each a full pass over the same tokens: the
// first parses the device-independent keys and skips the rest, the second
// parses the CUDA keys, skips the device-independent ones and rejects
// anything else with "Unrecognized key '<key>' in CUDA allocator config.".
// So an error in a device-independent option is reported before an unknown
// key that comes earlier in the string. ConfigTokenizer::checkToken only
// checks that a token exists, so a wrong separator where ":" or "," belongs
// is not an error; running out of tokens is "Index out of bounds in
// ConfigTokenizer". Integers are read with stoull, the two size bounds are
// >= 20, `>` fills from the entry after the last explicit one, and a bad
// boolean is "Expected 'True' or 'False' at index <i> in ConfigTokenizer but
// got '<token>'". It also takes the 2026 options.
//
// In both, the first K of a roundup_power2_divisions list also fills every
// lower entry with its value, and K maps to entry log2(K) clamped to 0..15,
// which covers sizes in [K MiB, 2K MiB).
//
// Backend: PyTorch picks the allocator backend once, at library load, by a
// separate scan of the settings string (backend.go), and each parse only
// checks that a backend option agrees with it. Apply plays that load on a
// Config that has neither Source nor EnvVar yet; after that, naming another
// backend fails with "Allocator backend parsed at runtime != allocator
// backend parsed at load time".
//
// Unknown keys and bad values are errors, with two exceptions that PyTorch
// has too: a bad expandable_segments_reserve value only warns there and is
// ignored here, and FromEnv cannot see keys in a variable the CUDA parser
// does not read (see FromEnv).

// Parse reads a settings string into a fresh Config in the new dialect.
func Parse(s string) (Config, error) {
	c := Default()
	err := c.Apply(s)
	return c, err
}

// Apply parses s in c.Dialect on top of c, the way
// torch.cuda.memory._set_allocator_settings(s) does. On error c is left
// unchanged (PyTorch would keep whatever it had set before the failing
// option) and the error is an *Error.
func (c *Config) Apply(s string) error {
	if err := c.apply(&s, &s); err != nil {
		return err
	}
	c.EnvVar = ""
	return nil
}

// apply runs the parser on a copy of c. generic is the string the
// device-independent parser reads and device the one the CUDA parser reads;
// either may be nil (not set). They differ only when FromEnv finds both
// PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF, as PyTorch 2.9 reads them
// in opposite orders.
func (c *Config) apply(generic, device *string) error {
	n := *c
	// A Config with no settings string of its own stands for a process
	// whose allocator has not been loaded yet.
	if n.Source == "" && n.EnvVar == "" && device != nil {
		if b, ok := loadTimeBackend(*device); ok {
			n.Backend = b
		}
	}
	n.MaxSplitSize = Unlimited
	n.RoundupPower2Divisions = [RoundupIntervals]uint64{}
	n.GarbageCollectionThreshold = 0

	if n.Dialect == DialectOld {
		if device != nil {
			if err := newParser(*device, &n).runOld(); err != nil {
				return err
			}
		}
	} else {
		if generic != nil {
			if err := newParser(*generic, &n).runGeneric(); err != nil {
				return err
			}
		}
		if device != nil {
			if err := newParser(*device, &n).runCUDA(); err != nil {
				return err
			}
		}
	}
	switch {
	case generic != nil:
		n.Source = *generic
	case device != nil:
		n.Source = *device
	}
	*c = n
	return nil
}

// parser walks the tokens of one settings string, mirroring PyTorch's index
// arithmetic so that the same strings are accepted and the same errors come
// first.
type parser struct {
	in     string
	end    int
	toks   []token
	c      *Config
	option string
}

func newParser(s string, c *Config) *parser {
	return &parser{in: s, end: lexEnd(s, c.Dialect), toks: lex(s, c.Dialect), c: c}
}

// has reports whether token i exists.
func (p *parser) has(i int) bool { return i >= 0 && i < len(p.toks) }

// tok is token i's text, "" past the end.
func (p *parser) tok(i int) string {
	if p.has(i) {
		return p.toks[i].text
	}
	return ""
}

// fail builds the error for token i (the end of input if there is none).
func (p *parser) fail(i int, msg string) *Error {
	e := &Error{Input: p.in, Offset: p.end, Option: p.option, Msg: msg}
	if p.has(i) {
		e.Offset, e.Token = p.toks[i].off, p.toks[i].text
	}
	return e
}

func (p *parser) failNum(i int, ne *numError) *Error {
	e := p.fail(i, ne.what)
	e.Detail = ne.detail
	return e
}

// fillRoundup sets table entries [from, to) to v.
func fillRoundup(t *[RoundupIntervals]uint64, from, to int, v uint64) {
	for i := max(from, 0); i < to && i < RoundupIntervals; i++ {
		t[i] = v
	}
}

// roundupIndex is the entry an interval key K (in MiB) selects:
// 63 - countLeadingZeros(K), clamped to the table.
func roundupIndex(k uint64) int {
	return min(max(log2(k), 0), RoundupIntervals-1)
}

func log2(v uint64) int {
	n := -1
	for ; v != 0; v >>= 1 {
		n++
	}
	return n
}

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

// maxMB is SIZE_MAX / 1 MiB, the clamp PyTorch applies to every size given
// in MB before multiplying, so the product cannot overflow.
const maxMB = Unlimited / MiB

package config

// Backend names accepted by the backend option (CUDA builds; ROCm builds
// also take hipMallocAsync, which this package does not model).
const (
	BackendNative          = "native"
	BackendCudaMallocAsync = "cudaMallocAsync"
)

// loadTimeBackend is BackendStaticInitializer::parseEnvForBackend: before
// any settings parser runs, PyTorch picks the backend by splitting the
// string at runs of whitespace and commas, splitting each piece at runs of
// colons, and taking the first piece whose first two parts are "backend"
// and a known backend. It disagrees with the tokenizer on odd input
// ("backend: cudaMallocAsync" is not seen here but is parsed later), and
// the runtime check then fails, as in PyTorch.
func loadTimeBackend(s string) (string, bool) {
	for _, opt := range regexSplit(s, func(c byte) bool { return c == ',' || isCSpace(c) }) {
		kv := regexSplit(opt, func(c byte) bool { return c == ':' })
		if len(kv) >= 2 && kv[0] == "backend" {
			switch kv[1] {
			case BackendCudaMallocAsync, BackendNative:
				return kv[1], true
			}
		}
	}
	return "", false
}

// regexSplit is std::sregex_token_iterator with submatch -1 over a regex
// "[...]+": the pieces between runs of separators, keeping an empty first
// piece when s starts with a separator but never an empty last one.
func regexSplit(s string, sep func(byte) bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		if !sep(s[i]) {
			i++
			continue
		}
		out = append(out, s[start:i])
		for i < len(s) && sep(s[i]) {
			i++
		}
		start = i
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

//go:build !cgo

package cuda

// Without cgo there is no dlopen: Open fails with ErrNoCgo, so no Device
// exists and the methods below are never reached. They exist so that the
// package, and everything importing it, builds with CGO_ENABLED=0.

type lib struct{ path string }

func loadLib(path string) (*lib, error) { return nil, ErrNoCgo }

func (l *lib) do(ctx uintptr, op int, x, y, z uint64) (a, b uint64, rc, step int) {
	return 0, 0, codeNotInitialized, stepCall
}

func (l *lib) errorText(rc int) (name, msg string) { return "", "" }

func (l *lib) deviceName(dev int) (string, int) { return "", codeNotInitialized }

func (l *lib) hook(fn, s string, a, b, c int64) (int64, error) { return 0, ErrNoCgo }

func (l *lib) repeat(ctx uintptr, n int, size uint64) int { return codeNotInitialized }

func shimOpcodes() []int { return nil }

const cgoEnabled = false

package gpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memreplay/memreplay/allocator"
)

// fault is one armed failure: the left-th call of kind call from when it was
// armed fails with err.
type fault struct {
	call Call
	left int
	err  error
}

// FailMalloc makes the nth Malloc from now fail with out of memory, once;
// n = 1 is the next call. It panics if n < 1, which is a mistake in the test
// that arms it.
func (p *Process) FailMalloc(n int) { mustArm(p.FailWith(CallMalloc, n, nil)) }

// FailCreatePage makes the nth CreatePage from now fail with out of memory,
// once.
func (p *Process) FailCreatePage(n int) { mustArm(p.FailWith(CallCreatePage, n, nil)) }

func mustArm(err error) {
	if err != nil {
		panic(err)
	}
}

// FailWith makes the nth call of kind call from now fail with err, once.
// Every call of that kind counts, whatever its outcome. A nil err means the
// call's out-of-memory error (a generic unknown error for calls that do not
// allocate). If err satisfies errors.Is(err, allocator.ErrFatal), the
// context is corrupted from that call on, as by InjectStickyError. Several
// faults that land on the same call fail it once.
func (p *Process) FailWith(call Call, n int, err error) error {
	if n < 1 {
		return fmt.Errorf("sim: FailWith(%s, %d): n counts from 1", call, n)
	}
	if call == CallDeviceSync || !slices.Contains(Calls(), call) {
		return fmt.Errorf("sim: FailWith: %q is not a call that can fail", call)
	}
	if err == nil {
		switch call {
		case CallMalloc, CallCreatePage, CallAddressReserve:
			err = oom(call)
		default:
			err = deviceError(call, errUnknown, "injected failure")
		}
	}
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	p.faults = append(p.faults, fault{call: call, left: n, err: err})
	return nil
}

// ClearFaults disarms every fault not yet fired. A sticky error stays.
func (p *Process) ClearFaults() {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	p.faults = nil
}

// fire counts call c against the armed faults and returns the error of the
// first one that comes due. A fatal one corrupts the context.
// armed says whether a fault is armed on calls of kind c.
func (p *Process) armed(c Call) bool {
	return slices.ContainsFunc(p.faults, func(f fault) bool { return f.call == c })
}

func (p *Process) fire(c Call) error {
	var hit error
	kept := p.faults[:0]
	for _, f := range p.faults {
		if f.call == c {
			f.left--
			if f.left == 0 {
				if hit == nil {
					hit = f.err
				}
				continue
			}
		}
		kept = append(kept, f)
	}
	p.faults = kept
	if hit != nil && errors.Is(hit, allocator.ErrFatal) {
		p.sticky = hit
	}
	return hit
}

// InjectStickyError corrupts the process's context, as a device-side assert
// or an illegal memory access does: every later device call fails with a
// sticky *allocator.DeviceError named name (cudaErrorAssert when empty;
// either the runtime or the driver spelling; unknown names are kept with
// code 999), for which errors.Is(err, allocator.ErrFatal) holds. Other
// processes on the GPU are unaffected. Only Close recovers.
func (p *Process) InjectStickyError(name string) {
	e := lookupSticky(name)
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	p.sticky = &stickyFault{e}
}

// Sticky returns the error that corrupted the context, or nil.
func (p *Process) Sticky() error {
	p.gpu.mu.Lock()
	defer p.gpu.mu.Unlock()
	return p.sticky
}

// stickyFault is the context corruption InjectStickyError causes. It is an
// error itself so that Sticky can report it before any call has failed.
type stickyFault struct{ name errName }

func (s *stickyFault) Error() string {
	return fmt.Sprintf("sim: context corrupted: %s (%d): %s", s.name.runtime, s.name.code, s.name.msg)
}

func (s *stickyFault) Is(target error) bool { return target == allocator.ErrFatal }

// stickyError is what call c returns on a corrupted context. Like CUDA, it
// reports the corruption under each call's own name (and, for an injected
// one, in the call's runtime or driver spelling). A fatal error given to
// FailWith that is not a DeviceError is returned as given.
func (p *Process) stickyError(c Call) error {
	switch s := p.sticky.(type) {
	case *stickyFault:
		e := deviceError(c, s.name, "")
		e.Sticky = true
		return e
	case *allocator.DeviceError:
		e := *s
		e.Call = string(c)
		return &e
	}
	return p.sticky
}

//go:build !cgo

package fakecuda

import "errors"

const cgoEnabled = false

type handle struct{}

var errNoCgo = errors.New("fakecuda: built without cgo")

func dlopen(string) (*handle, error) { return nil, errNoCgo }

func (*handle) call(string, string, int64, int64, int64) (int64, error) { return 0, errNoCgo }

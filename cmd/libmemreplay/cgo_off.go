//go:build !cgo

package main

// Without cgo there are no exported C functions: the command builds (so
// that `go build ./...` and `go vet ./...` work with CGO_ENABLED=0), but
// `go build -buildmode=c-shared` needs cgo.
const cgoEnabled = false

//go:build cgo

package main

// cgoEnabled says whether the library's C side is built (the tests skip
// what needs it otherwise).
const cgoEnabled = true

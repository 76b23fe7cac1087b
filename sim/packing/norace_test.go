//go:build !race

package packing_test

func trialsN(n int) int { return n }

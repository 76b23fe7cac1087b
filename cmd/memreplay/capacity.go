package main

import (
	"fmt"

	"github.com/memreplay/memreplay/sim/gpu"
)

// parseCapacity reads --capacity: a size (24GiB) or a preset's name
// (rtx-24gb, sim/gpu.Presets).
func parseCapacity(s string) (uint64, error) {
	if p, ok := gpu.LookupPreset(s); ok {
		return p.Capacity, nil
	}
	c, err := parseSize(s)
	if err != nil {
		var names []string
		for _, p := range gpu.Presets {
			names = append(names, p.Name)
		}
		return 0, fmt.Errorf("%v, or a preset: %v", err, names)
	}
	return c, nil
}

package gpu

import (
	"slices"
	"strings"
)

// A Preset is a card's memory as PyTorch reports it
// (torch.cuda.get_device_properties(0).total_memory, the "total capacity"
// of an OOM message), which is less than the size on the box: the driver
// and the ECC/reserved regions take their share before any process runs.
type Preset struct {
	Name     string
	Capacity uint64
	About    string
}

// Presets are the named capacities `--capacity` accepts.
//
// rtx-24gb is the card of the BERT-family study: its OOM messages say "GPU
// 0 has a total capacity of 23.56 GiB". PyTorch prints two decimals, so the
// bytes are known to 0.01 GiB; 24125 MiB is 23.5596 GiB, which prints as
// 23.56.
var Presets = []Preset{
	{Name: "rtx-24gb", Capacity: 24125 << 20, About: `a 24 GB card as PyTorch reports it ("total capacity of 23.56 GiB"), the BERT-family study's`},
}

// LookupPreset finds a preset by name, ignoring case.
func LookupPreset(name string) (Preset, bool) {
	i := slices.IndexFunc(Presets, func(p Preset) bool { return strings.EqualFold(p.Name, name) })
	if i < 0 {
		return Preset{}, false
	}
	return Presets[i], true
}

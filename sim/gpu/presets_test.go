package gpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/sim/gpu"
)

// The preset prints as the BERT-family study's OOM messages print their
// card: "total capacity of 23.56 GiB".
func TestRTX24GBPresetPrintsAsTheStudysCard(t *testing.T) {
	p, ok := gpu.LookupPreset("RTX-24GB")
	require.True(t, ok)
	assert.Equal(t, "23.56 GiB", allocator.FormatSize(p.Capacity))
	_, ok = gpu.LookupPreset("rtx-48gb")
	assert.False(t, ok)
}

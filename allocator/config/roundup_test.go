package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func table(entries ...uint64) [RoundupIntervals]uint64 {
	var t [RoundupIntervals]uint64
	copy(t[:], entries)
	return t
}

// test_allocator_settings' list: each K covers [K MiB, 2K MiB), the first K
// also fills everything below it, and here `>` repeats the value of the
// last explicit entry, so both dialects agree.
func TestRoundupListFromPyTorchTest(t *testing.T) {
	const in = "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"
	want := table(8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 1, 1, 1, 1, 1, 1)
	for _, d := range both {
		t.Run(dialectName(d), func(t *testing.T) {
			c := fresh(d)
			require.NoError(t, c.Apply(in))
			assert.Equal(t, want, c.RoundupPower2Divisions)
			assert.Equal(t, uint64(8), c.RoundupDivisions(84*MiB))
			assert.Equal(t, uint64(2), c.RoundupDivisions(400*MiB))
			assert.Equal(t, uint64(8), c.RoundupDivisions(1*MiB), "below the first K")
			assert.Equal(t, uint64(2), c.RoundupDivisions(128*MiB))
			assert.Equal(t, uint64(8), c.RoundupDivisions(128*MiB-1))
			assert.Equal(t, uint64(1), c.RoundupDivisions(1200*MiB))
			assert.Equal(t, uint64(1), c.RoundupDivisions(64<<30))

			// A re-parse resets the table.
			require.NoError(t, c.Apply("expandable_segments:False"))
			assert.Zero(t, c.RoundupDivisions(84*MiB))
		})
	}
}

func TestRoundupListDialectsDiffer(t *testing.T) {
	for _, tc := range []struct {
		in       string
		old, new [RoundupIntervals]uint64
	}{
		// Old: `>` starts at the last explicit entry and overwrites it.
		// New: it starts after it.
		{
			"[64:8,1024:4,>:1]",
			table(8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 1, 1, 1, 1, 1, 1),
			table(8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 4, 1, 1, 1, 1, 1),
		},
		// Before any explicit entry last_index is 0: the old fill covers
		// entry 0, the new one starts at 1.
		{
			"[>:2]",
			table(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2),
			table(0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2),
		},
		// An explicit K after `>` overwrites one entry.
		{
			"[128:2,>:4,1024:1]",
			table(2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 1, 4, 4, 4, 4, 4),
			table(2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 1, 4, 4, 4, 4, 4),
		},
		{
			"[64:8,128:2,256:2,512:2,1024:1,>:0]",
			table(8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 0, 0, 0, 0, 0, 0),
			table(8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 1, 0, 0, 0, 0, 0),
		},
	} {
		for _, d := range both {
			c := fresh(d)
			require.NoError(t, c.Apply("roundup_power2_divisions:"+tc.in))
			want := tc.new
			if d == DialectOld {
				want = tc.old
			}
			assert.Equal(t, want, c.RoundupPower2Divisions, "%s %s", dialectName(d), tc.in)
		}
	}
}

func TestRoundupListBothDialects(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [RoundupIntervals]uint64
	}{
		{"[1:4]", table(4)},
		{"[2:4]", table(4, 4)},
		{"[1:4,2:0,4:2]", table(4, 0, 2)},
		// Keys clamp to the last entry.
		{"[65536:2]", table(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)},
		{"[32768:16]", table(16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16)},
		// Only the first K fills below it; later ones set one entry.
		{"[256:4,64:8]", table(4, 4, 4, 4, 4, 4, 8, 4, 4)},
		{"[2048:0,64:4]", table(0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0)},
	} {
		for _, d := range both {
			c := fresh(d)
			require.NoError(t, c.Apply("roundup_power2_divisions:"+tc.in))
			assert.Equal(t, tc.want, c.RoundupPower2Divisions, "%s %s", dialectName(d), tc.in)
		}
	}
}

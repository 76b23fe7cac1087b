package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reparse reads c.String() back in c's dialect, starting from the defaults.
// Source and EnvVar say where a Config came from and are carried over.
func reparse(c Config) (Config, error) {
	r := fresh(c.Dialect)
	err := r.Apply(c.String())
	r.Source, r.EnvVar = c.Source, c.EnvVar
	return r, err
}

func TestStringDefaultsIsEmpty(t *testing.T) {
	assert.Equal(t, "", Default().String())
	assert.Equal(t, "", fresh(DialectOld).String())
}

func TestStringCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"expandable_segments:True,max_split_size_mb:64", "max_split_size_mb:64,expandable_segments:True"},
		{"expandable_segments:False,pinned_num_register_threads:1", ""},
		{"max_split_size_mb:-1", "max_split_size_mb:-1"},
		{"max_split_size_mb:18446744073709551615", "max_split_size_mb:-1"},
		{"roundup_power2_divisions:[1:4,>:4]", "roundup_power2_divisions:4"},
		{"roundup_power2_divisions:[1:4,32768:4]", "roundup_power2_divisions:[1:4,32768:4]"},
		{"roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]",
			"roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"},
		{"roundup_power2_divisions:[1:0,64:8,>:8]", "roundup_power2_divisions:[32:0,64:8,>:8]"},
		{"roundup_power2_divisions:[32768:0,64:8]", "roundup_power2_divisions:[32:0,64:8]"},
		{"roundup_power2_divisions:[4:2,8:0,16:2]", "roundup_power2_divisions:[4:2,16:2]"},
		{"garbage_collection_threshold:0.1", "garbage_collection_threshold:0.1"},
		{"garbage_collection_threshold:1e-5", "garbage_collection_threshold:1e-05"},
		{"per_process_memory_fraction:0", "per_process_memory_fraction:0"},
		{"pinned_reserve_segment_size_mb:-2", "pinned_reserve_segment_size_mb:-2"},
		{"backend:cudaMallocAsync", "backend:cudaMallocAsync"},
		{"expandable_segments_reserve_by_class:[z:1,a:2G]", "expandable_segments_reserve_by_class:[a:2G,z:1]"},
	} {
		c, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, c.String(), tc.in)
	}
}

func TestStringRoundTripsEveryAcceptedCase(t *testing.T) {
	for _, tc := range acceptCases {
		for _, d := range tc.dialects {
			c := fresh(d)
			require.NoError(t, c.Apply(tc.in))
			r, err := reparse(c)
			require.NoError(t, err, "%s %q -> %q", dialectName(d), tc.in, c.String())
			assert.Equal(t, c, r, "%s %q -> %q", dialectName(d), tc.in, c.String())
		}
	}
}

// Every table the two dialects can build from lists of up to three entries
// is written so that both read it back the same.
func TestStringRoundTripsRoundupTables(t *testing.T) {
	keys := []string{"1", "2", "64", "128", "1024", "32768", ">"}
	vals := []string{"0", "1", "2", "8"}
	var entries []string
	for _, k := range keys {
		for _, v := range vals {
			entries = append(entries, k+":"+v)
		}
	}
	n := 0
	for _, a := range entries {
		for _, b := range entries {
			for _, e := range []string{a, a + "," + b, b + "," + a + ",>:" + "2"} {
				for _, d := range both {
					c := fresh(d)
					require.NoError(t, c.Apply("roundup_power2_divisions:["+e+"]"))
					r, err := reparse(c)
					require.NoError(t, err, c.String())
					require.Equal(t, c.RoundupPower2Divisions, r.RoundupPower2Divisions, "%s [%s] -> %s", dialectName(d), e, c.String())
					if d == DialectNew {
						o := fresh(DialectOld)
						require.NoError(t, o.Apply(c.String()))
						require.Equal(t, c.RoundupPower2Divisions, o.RoundupPower2Divisions, "old reading %s", c.String())
					}
					n++
				}
			}
		}
	}
	assert.Greater(t, n, 1000)
}

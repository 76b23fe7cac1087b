package par_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/sim/par"
)

// writeShards runs o in n shards, each written to and read back from a
// file as the CLI does, so that the JSON round trip is part of the test.
func writeShards(t *testing.T, o par.Options, n int) []*par.Shard {
	t.Helper()
	dir := t.TempDir()
	var out []*par.Shard
	for i := range n {
		sh, err := par.RunShard(o, i, n)
		require.NoError(t, err)
		b, err := json.Marshal(sh)
		require.NoError(t, err)
		path := filepath.Join(dir, "part-"+string(rune('0'+i))+".json")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		back, err := par.ReadShard(path)
		require.NoError(t, err)
		out = append(out, back)
	}
	return out
}

func TestMergeEqualsRun(t *testing.T) {
	o := small(t)
	o.MaxPAR, o.Mixes, o.Packed = 4, 7, true // 7 mixes in 3 shards: 3, 2 and 2
	one, err := par.Run(o)
	require.NoError(t, err)
	require.Positive(t, one.Results[0].Rows[2].MixesWithOOM, "the comparison covers OOM mixes")
	parts := writeShards(t, o, 3)
	assert.Len(t, parts[0].Mixes, 3)
	// The order of the parts does not matter.
	merged, err := par.Merge([]*par.Shard{parts[2], parts[0], parts[1]})
	require.NoError(t, err)
	a, err := json.MarshalIndent(one, "", "  ")
	require.NoError(t, err)
	b, err := json.MarshalIndent(merged, "", "  ")
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b))
}

func TestMergeRefusesWrongParts(t *testing.T) {
	o := small(t)
	o.MaxPAR, o.Mixes = 2, 4
	parts := writeShards(t, o, 2)
	o.Seed++
	other := writeShards(t, o, 2)

	_, err := par.Merge([]*par.Shard{parts[0], other[1]})
	require.Error(t, err)
	assert.Contains(t, err.Error(), other[1].Name)
	assert.Contains(t, err.Error(), "another search")

	_, err = par.Merge([]*par.Shard{parts[0], parts[1], parts[1]})
	require.Error(t, err)
	assert.Contains(t, err.Error(), parts[1].Name)
	assert.Contains(t, err.Error(), "given twice")

	_, err = par.Merge([]*par.Shard{parts[1]})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shard 0/2 is missing")

	// A part whose mixes are not its index's (edited, or of another split).
	parts[1].Mixes[0].Mix = 0
	_, err = par.Merge(parts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), parts[1].Name)
}

func TestParseShard(t *testing.T) {
	i, n, err := par.ParseShard("2/5")
	require.NoError(t, err)
	assert.Equal(t, [2]int{2, 5}, [2]int{i, n})
	for _, bad := range []string{"5/5", "-1/3", "1", "a/3", "1/0", "1/3x", " 1/3"} {
		_, _, err := par.ParseShard(bad)
		assert.Error(t, err, bad)
	}
}

func TestReadShardRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"notjson":  `{"format": "memreplay-par-shard/1",`,
		"other":    `{"format": "something else"}`,
		"count":    `{"format": "memreplay-par-shard/1", "index": 0, "count": -1}`,
		"mixes":    `{"format": "memreplay-par-shard/1", "index": 0, "count": 1, "search": {"mixes": -5, "max_par": 2, "trials_per_worker": 1, "confidence": 0.9, "settings": [""]}}`,
		"settings": `{"format": "memreplay-par-shard/1", "index": 0, "count": 1, "search": {"mixes": 2, "max_par": 2, "trials_per_worker": 1, "confidence": 0.9}}`,
	} {
		path := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		_, err := par.ReadShard(path)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), path, name)
	}
	// A part whose mixes do not have the search's shape.
	o := small(t)
	o.MaxPAR, o.Mixes = 2, 2
	parts := writeShards(t, o, 1)
	parts[0].Mixes[1].Settings[0].Fixed = parts[0].Mixes[1].Settings[0].Fixed[:1]
	_, err := par.Merge(parts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), parts[0].Name+": mix 1: 1 PARs, want 2")
}

// A part that is not JSON is refused at its first bytes, and one past
// par.MaxShardBytes once that much was read: the merge read a file
// whole, so /dev/zero as a part ran the process out of memory.
func TestReadShardBoundsItsInput(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	_, err := par.ReadShard("/dev/zero")
	require.EqualError(t, err, `/dev/zero: byte offset 1: not a par shard: invalid character '\x00' looking for beginning of value`)

	// JSON that goes on past the bound (lowered from 1 GiB to 1 MiB).
	require.EqualValues(t, 1<<30, par.MaxShardBytes)
	defer par.SetMaxShardBytes(1 << 20)()
	path := filepath.Join(t.TempDir(), "long.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"format": "`+strings.Repeat("x", 1<<20)+`"}`), 0o644))
	_, err = par.ReadShard(path)
	require.EqualError(t, err, path+": larger than 1048576 bytes: not a par shard (split the search into more shards)")

	// Data after the part.
	require.NoError(t, os.WriteFile(path, []byte(`{"format": "x"} {}`), 0o644))
	_, err = par.ReadShard(path)
	require.EqualError(t, err, path+": not a par shard: more data after the part's JSON object")
}

package par

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStatsCarryEveryField guards the shards against a figure added to
// mixResult and not to MixStats: every field set to something non-zero
// must survive the trip through a shard. Of the workers' Summary only what
// the report reads travels.
func TestStatsCarryEveryField(t *testing.T) {
	var r mixResult
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if v.Type().Field(i).Name == "sum" {
			continue
		}
		f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"a", "b"}))
		default:
			t.Fatalf("mixResult.%s: a kind this test does not fill (%s); carry it in MixStats and fill it here", v.Type().Field(i).Name, f.Kind())
		}
	}
	r.sum.PeakDeviceUsed, r.sum.PeakReserved, r.sum.PeakLive, r.sum.Events = 1, 2, 3, 4
	assert.Equal(t, r, fromStats(r.stats()))
}

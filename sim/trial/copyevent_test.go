package trial

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memreplay/memreplay/trace"
)

// TestCopyEventCopiesEveryField sets each field of the source in turn to a
// value unlike the destination's and checks that copyEvent carries it: a
// field added to trace.Event and not to copyEvent fails here.
func TestCopyEventCopiesEveryField(t *testing.T) {
	typ := reflect.TypeOf(trace.Event{})
	for i := range typ.NumField() {
		var src trace.Event
		dst := trace.Event{Label: "old", Addr: 7}
		f := reflect.ValueOf(&src).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("new")
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(3)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(3)
		default:
			t.Fatalf("trace.Event.%s: copyEvent's test knows no %s", typ.Field(i).Name, f.Kind())
		}
		copyEvent(&dst, &src)
		require.Equal(t, src, dst, "field %s", typ.Field(i).Name)
	}
}

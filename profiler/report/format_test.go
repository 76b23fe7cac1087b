package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Durations print to three significant digits, whatever digits the value
// has: a column read "20.9661ms" beside "3.05ms".
func TestDurationThreeDigits(t *testing.T) {
	for ns, want := range map[time.Duration]string{
		0:                         "0s",
		7:                         "7ns",
		999:                       "999ns",
		1500:                      "1.50µs",
		20966100:                  "21.0ms",
		3050000:                   "3.05ms",
		412345678:                 "412ms",
		999700000:                 "1.00s",
		999_700:                   "1.00ms",
		12345678900:               "12.3s",
		90 * time.Second:          "1.50min",
		5*time.Hour + time.Minute: "5.02h",
		-3050000:                  "-3.05ms",
		1748920500:                "1.75s",
	} {
		require.Equal(t, want, duration(int64(ns)), "%d ns", int64(ns))
	}
}

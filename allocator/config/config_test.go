package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoundupIndex(t *testing.T) {
	require.Equal(t, 0, RoundupIndex(0))
	require.Equal(t, 0, RoundupIndex(2*MiB-1))
	require.Equal(t, 1, RoundupIndex(2*MiB))
	require.Equal(t, 15, RoundupIndex(1<<62))
}

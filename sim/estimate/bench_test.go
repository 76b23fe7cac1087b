package estimate_test

import (
	"testing"

	"github.com/memreplay/memreplay/sim/estimate"
	"github.com/memreplay/memreplay/sim/trial"
)

// BenchmarkBERTLarge is the prediction a gate makes before every trial
// (target: under 50 ms; bench/estimate.sh, docs/estimate.md).
func BenchmarkBERTLarge(b *testing.B) {
	for _, c := range []struct {
		name string
		sp   trial.Spec
	}{
		{"b16_s128_fp16", spec(b, "bert-large", 16, 128, trial.FP16)},
		{"b32_s512_fp32", spec(b, "bert-large", 32, 512, trial.FP32)},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.sp.Steps = 0 // the default trial
			for b.Loop() {
				if _, err := estimate.Spec(c.sp, estimate.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

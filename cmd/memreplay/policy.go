package main

import (
	"fmt"
	"strings"

	"github.com/memreplay/memreplay/allocator"
	"github.com/memreplay/memreplay/allocator/config"
)

// policyUsage is the --policy flag's help, the same on every command.
var policyUsage = "allocator policy: " + strings.Join(allocator.PolicyNames(), ", ") +
	" (pytorch, the default, decides exactly as PyTorch; see docs/allocator.md)"

// parsePolicy reads --policy NAME; a bad name is a usage error (exit 2).
func parsePolicy(name string) (allocator.Policy, error) {
	p, err := allocator.NewPolicy(name)
	if err != nil {
		return nil, usageError{fmt.Errorf("--policy: %v", err)}
	}
	return p, nil
}

// policyRun is one --policy row of compare and report: NAME, or
// NAME:CONF to run the policy under PYTORCH_CUDA_ALLOC_CONF settings
// (lifetime:expandable_segments:True).
type policyRun struct {
	label  string
	policy allocator.Policy
	conf   *config.Config // nil: the trace's own settings
}

func parsePolicyRun(s string) (policyRun, error) {
	name, conf, hasConf := strings.Cut(s, ":")
	p, err := parsePolicy(name)
	if err != nil {
		return policyRun{}, err
	}
	r := policyRun{label: "policy " + name, policy: p}
	if hasConf {
		if r.conf, err = parseAllocConf(conf); err != nil {
			return policyRun{}, err
		}
		r.label += " + " + conf
	}
	return r, nil
}

// Package policytest gives tests the default policy, compiled once per
// test process: compiling runs the policy's Rego tests, which takes
// seconds (several times more under -race), and a fleet started for
// every test would otherwise pay it each time.
//
// Only tests import this package.
package policytest

import (
	"context"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/policy"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

var compiled = sync.OnceValues(func() (*policy.Policy, error) {
	return policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
})

// Default is the built-in policy (policy/*.rego), compiled. A Policy is
// immutable and safe for concurrent use, as an executor's calls share
// theirs: every test of the process gets the same one. Its Files are
// shared too, and must not be changed; a test that wants another set
// starts from defaultpolicy.Default(), a fresh copy.
func Default(tb testing.TB) *policy.Policy {
	tb.Helper()
	p, err := compiled()
	if err != nil {
		tb.Fatalf("the default policy does not compile: %v", err)
	}
	return p
}

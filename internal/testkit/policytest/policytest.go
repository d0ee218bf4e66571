// Package policytest gives tests the default policy, compiled once per
// test process: compiling runs the policy's Rego tests, which takes
// seconds (several times more under -race), and a fleet started for
// every test would otherwise pay it each time.
//
// Only tests import this package.
package policytest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

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

var team = sync.OnceValues(nkeys.CreateUser)

// Team is a policy team's signing key, the same for every test of the
// process; TeamSigners is the trust list that holds it.
func Team(tb testing.TB) nkeys.KeyPair {
	tb.Helper()
	kp, err := team()
	if err != nil {
		tb.Fatal(err)
	}
	return kp
}

// TeamSigners is a trust list of Team's key alone.
func TeamSigners(tb testing.TB) *policy.Signers {
	tb.Helper()
	pub, err := Team(tb).PublicKey()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := policy.ParseSigners(strings.NewReader(pub + "\n"))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Push pushes files to the whole fleet, signed by Team, as by.
func Push(tb testing.TB, js jetstream.JetStream, files policy.Files, by string) *policy.Pushed {
	tb.Helper()
	p, _, err := policy.Push(context.Background(), js, files, policy.PushOptions{By: by, Key: Team(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

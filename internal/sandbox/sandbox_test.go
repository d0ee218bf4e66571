package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// A policy that cannot be enforced as written is refused up front, not
// turned into a confinement that lets through what it was to keep out.
func TestNewRefusesWhatCannotBeEnforced(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Policy
		says string
	}{
		{"a relative hidden path", Policy{Hidden: []string{"data"}}, "not an absolute path"},
		{"a relative writable path", Policy{Writable: []string{"."}}, "not an absolute path"},
		{"a workspace inside the data dir", Policy{Writable: []string{"/srv/data/ws"}, Hidden: []string{"/srv/data"}}, "inside the hidden"},
		{"a workspace that is the data dir", Policy{Writable: []string{"/srv/data/"}, Hidden: []string{"/srv/data"}}, "inside the hidden"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("got %v, want an error saying %q", err, tt.says)
			}
		})
	}
	// A prefix is not a parent: /srv/data-ws is not inside /srv/data.
	if _, err := New(Policy{Writable: []string{"/srv/data-ws"}, Hidden: []string{"/srv/data"}}); err != nil {
		t.Errorf("a sibling with a common prefix: %v", err)
	}
}

// The ports a policy lets a confined process connect to are those it
// lists less toolbus's own: a reserved port listed by mistake stays
// refused.
func TestPortsLeaveOutTheReserved(t *testing.T) {
	p := Policy{Connect: []uint16{443, 4222, 22, 443, 7879}, Reserved: []uint16{4222, 7879}}
	if got := p.Ports(); !slices.Equal(got, []uint16{22, 443}) {
		t.Errorf("got %v, want [22 443]", got)
	}
	if got := (&Policy{Reserved: []uint16{22}}).Ports(); len(got) != 0 {
		t.Errorf("no ports listed: got %v, want none", got)
	}
	if _, err := New(Policy{Connect: []uint16{0}}); err == nil {
		t.Error("port 0 was taken")
	}
}

// Coverage names what a kernel leaves unconfined, part by part, and a
// policy that leaves TCP free (AnyPort) is not covered for the network
// whatever the kernel.
func TestCoverage(t *testing.T) {
	for _, tt := range []struct {
		c        Coverage
		missing  []string
		complete bool
	}{
		{Coverage{}, []string{"file system", "network", "signals and abstract sockets"}, false},
		{Coverage{ABI: 3, Files: true}, []string{"network", "signals and abstract sockets"}, false},
		{Coverage{ABI: 5, Files: true, Network: true}, []string{"signals and abstract sockets"}, false},
		{Coverage{ABI: 7, Files: true, Network: true, Scopes: true}, nil, true},
	} {
		if got := tt.c.Missing(); !slices.Equal(got, tt.missing) || tt.c.Complete() != tt.complete {
			t.Errorf("%+v: missing %q complete %v, want %q %v", tt.c, got, tt.c.Complete(), tt.missing, tt.complete)
		}
	}
	for abi, want := range []Coverage{
		{}, {ABI: 1, Files: true}, {ABI: 2, Files: true}, {ABI: 3, Files: true},
		{ABI: 4, Files: true, Network: true}, {ABI: 5, Files: true, Network: true},
		{ABI: 6, Files: true, Network: true, Scopes: true}, {ABI: 7, Files: true, Network: true, Scopes: true},
	} {
		if got := coverageOf(abi); got != want {
			t.Errorf("ABI %d: got %+v, want %+v", abi, got, want)
		}
	}
	want := Coverage{}
	if abi, err := ABI(); err == nil {
		want = coverageOf(abi)
	}
	if got := Covered(); got != want {
		t.Errorf("this kernel: got %+v, want %+v", got, want)
	}
	s, err := New(Policy{AnyPort: true})
	if err != nil {
		t.Fatal(err)
	}
	want.Network = false
	if got := s.Covered(); got != want {
		t.Errorf("AnyPort: got %+v, want %+v", got, want)
	}
	s, _ = New(Policy{})
	if got := s.Covered(); got != Covered() {
		t.Errorf("a policy of ports: got %+v, want the kernel's %+v", got, Covered())
	}
}

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

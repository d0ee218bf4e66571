package sandbox

import (
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
